//! Input from a person that memvisor refuses: [`BadInput`], one line that names the value and
//! what would be right, reported with exit status 2. A leaf that the commands share.

use std::process::ExitCode;

use memvisor_api::exit::status;

/// A check of a person's input that failed: reported as one line, exit status 2.
pub struct BadInput(pub String);

impl BadInput {
    /// Prints the line on stderr and returns the exit status for bad input.
    pub fn report(self) -> ExitCode {
        eprintln!("memvisor: {}", self.0);
        ExitCode::from(status::BAD_INPUT)
    }
}
