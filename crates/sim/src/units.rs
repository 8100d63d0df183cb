//! Sizes and durations as a scenario writes them: `512M`, `2G` or bytes ([`parse_size`], the
//! same parser as the host's config), `30s`, `1h` or seconds ([`parse_duration`]).

use memvisor_api::{parse_duration, parse_size};
use serde::{Deserialize, Deserializer};

/// Bytes, from a number of bytes or a size string; a negative number is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

/// Seconds, from a number of seconds or a duration string; a negative number is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Secs(pub f64);

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Int(i64),
    Float(f64),
    Str(String),
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Raw::deserialize(d)? {
            Raw::Int(n) => u64::try_from(n)
                .map(Size)
                .map_err(|_| D::Error::custom(format!("{n} is negative; a size is 0 or more"))),
            Raw::Float(f) => Err(D::Error::custom(format!(
                "{f} is not a size; give whole bytes or one like 512M"
            ))),
            Raw::Str(s) => parse_size(&s).map(Size).map_err(D::Error::custom),
        }
    }
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let secs = match Raw::deserialize(d)? {
            Raw::Int(n) => n as f64,
            Raw::Float(f) => f,
            Raw::Str(s) => parse_duration(&s).map_err(D::Error::custom)?.as_secs_f64(),
        };
        if secs.is_finite() && secs >= 0.0 {
            Ok(Secs(secs))
        } else {
            Err(D::Error::custom(format!(
                "{secs} is not a duration; give 0 or more seconds"
            )))
        }
    }
}
