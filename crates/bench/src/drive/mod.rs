//! Each family of experiments from its flags to its outputs: check the flags (bad input is one
//! line), set up, run every repetition (`run`), write the outputs (`output`), tear down.

pub mod phases;
