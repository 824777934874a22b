//! How values are written in a configuration file, as serde
//! (de)serializers: sizes with binary units, durations, and settings
//! where one word stands for "none" (`"never"`, `"auto"`, `"off"`).
//! Errors say what is expected and show what was found.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use figment::value::Value;
use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};

/// A size in bytes: an integer, or a string with a binary unit (`"64KiB"`,
/// `"4 MiB"`, `"1GiB"`). Decimal units (`"64MB"`) are refused: which one
/// was meant is a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteSize(pub(crate) u64);

impl ByteSize {
    pub(super) fn of(n: usize) -> Self {
        Self(n as u64)
    }

    /// The size as `usize`, once validated against [`USIZE`].
    pub(super) fn get(self) -> usize {
        usize::try_from(self.0).expect("validated against usize::MAX")
    }

    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Num(_, n) => match unsigned(*n) {
                Some(n) => u64::try_from(n)
                    .map(Self)
                    .map_err(|_| format!("{n} is too large")),
                None if n.to_i128().is_some() => {
                    Err(format!("must not be negative, found {}", show(v)))
                }
                None => Err(format!(
                    "expected a whole number of bytes, found {}",
                    show(v)
                )),
            },
            Value::String(_, s) => size(s).map(Self),
            _ => Err(format!(
                "expected a size in bytes (an integer, or a string like \"64MiB\"), found {}",
                show(v)
            )),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 != 0 && self.0.trailing_zeros() >= shift {
                return s.serialize_str(&format!("{}{unit}", self.0 >> shift));
            }
        }
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::from_value(&<Value as Deserialize>::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// `"65536"`, `"64KiB"`, `"4 MiB"`, `"1GiB"`: bytes, binary units only.
pub(super) fn size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad =
        || format!("expected a size like 65536, \"64KiB\", \"4MiB\" or \"1GiB\", found {text:?}");
    let number: u64 = number.replace('_', "").parse().map_err(|_| bad())?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// An integer that is not negative (TOML's are signed, variables'
/// unsigned).
fn unsigned(n: figment::value::Num) -> Option<u128> {
    n.to_u128()
        .or_else(|| n.to_i128().and_then(|i| u128::try_from(i).ok()))
}

/// A value as errors show it: `string "lots"`, `integer 10`.
fn show(v: &Value) -> String {
    match v {
        Value::String(_, s) => format!("string {s:?}"),
        Value::Num(_, n) => match (n.to_i128(), n.to_f64()) {
            (Some(i), _) => format!("integer {i}"),
            (None, Some(f)) => format!("float {f}"),
            _ => "a number".into(),
        },
        Value::Bool(_, b) => format!("boolean {b}"),
        Value::Array(..) => "an array".into(),
        Value::Dict(..) => "a table".into(),
        Value::Char(_, c) => format!("character {c:?}"),
        Value::Empty(..) => "nothing".into(),
    }
}

fn duration_text(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("expected a duration like \"100ms\", \"10s\" or \"1m 30s\", found {text:?} ({e})")
    })
}

fn duration_value(v: &Value) -> Result<Duration, String> {
    match v {
        Value::String(_, s) => duration_text(s),
        other => Err(format!(
            "expected a duration with a unit, like \"100ms\" or \"10s\", found {}",
            show(other)
        )),
    }
}

fn count_value(v: &Value) -> Result<usize, String> {
    let parsed = match v {
        Value::Num(_, n) => unsigned(*n).and_then(|n| usize::try_from(n).ok()),
        Value::String(_, s) => s.trim().parse().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| format!("expected a count, found {}", show(v)))
}

/// `Option<T>` written as a value or one word for `None` (`"never"`,
/// `"auto"`, `"none"`, `""`): the (de)serializers for
/// `#[serde(with = ..)]`.
macro_rules! word_or {
    ($name:ident, $word:literal, $t:ty, $parse:expr, $show:expr) => {
        pub(crate) mod $name {
            use super::*;
            pub(crate) fn serialize<S: Serializer>(v: &Option<$t>, s: S) -> Result<S::Ok, S::Error> {
                match v {
                    None => s.serialize_str($word),
                    Some(x) => ($show)(x).serialize(s),
                }
            }
            pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
                d: D,
            ) -> Result<Option<$t>, D::Error> {
                let v = <Value as Deserialize>::deserialize(d)?;
                if matches!(&v, Value::String(_, s) if s.trim() == $word) {
                    return Ok(None);
                }
                let parse: fn(&Value) -> Result<$t, String> = $parse;
                parse(&v)
                    .map(Some)
                    .map_err(|e| D::Error::custom(format!("{e}, or \"{}\"", $word)))
            }
        }
    };
}

word_or!(
    never_bytes,
    "never",
    ByteSize,
    ByteSize::from_value,
    |b: &ByteSize| *b
);
word_or!(
    auto_bytes,
    "auto",
    ByteSize,
    ByteSize::from_value,
    |b: &ByteSize| *b
);
word_or!(
    never_duration,
    "never",
    Duration,
    duration_value,
    |d: &Duration| { humantime::format_duration(*d).to_string() }
);
word_or!(none_count, "none", usize, count_value, |n: &usize| *n);
word_or!(
    no_addr,
    "",
    SocketAddr,
    |v| match v {
        Value::String(_, s) => s
            .trim()
            .parse()
            .map_err(|_| format!("expected a socket address like \"0.0.0.0:2552\", found {s:?}")),
        other => Err(format!("expected a socket address, found {}", show(other))),
    },
    |a: &SocketAddr| a.to_string()
);
word_or!(
    any_network,
    "any",
    Vec<IpNet>,
    |v| match v {
        Value::Array(_, items) => items
            .iter()
            .map(|n| match n {
                Value::String(_, s) => s
                    .trim()
                    .parse()
                    .map_err(|_| format!("expected networks like \"10.0.0.0/8\", found {s:?}")),
                other => Err(format!("expected a network, found {}", show(other))),
            })
            .collect(),
        other => Err(format!(
            "expected an array of networks, found {}",
            show(other)
        )),
    },
    |l: &Vec<IpNet>| l.iter().map(ToString::to_string).collect::<Vec<_>>()
);

/// A size in bytes held as `usize` (`cluster.max_packet_size`), written
/// as an integer.
pub(crate) mod bytes {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v as u64)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let size = ByteSize::deserialize(d)?;
        usize::try_from(size.0).map_err(|_| D::Error::custom(format!("{} is too large", size.0)))
    }
}

/// `down_all_when_unstable`: `"auto"` (`None`), `"off"` (`Some(None)`) or
/// a duration.
pub(crate) mod unstable {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        v: &Option<Option<Duration>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_str("auto"),
            Some(None) => s.serialize_str("off"),
            Some(Some(d)) => s.serialize_str(&humantime::format_duration(*d).to_string()),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<Duration>>, D::Error> {
        match <Value as Deserialize>::deserialize(d)? {
            Value::String(_, s) if s.trim() == "auto" => Ok(None),
            Value::String(_, s) if s.trim() == "off" => Ok(Some(None)),
            v => duration_value(&v)
                .map(|d| Some(Some(d)))
                .map_err(|e| D::Error::custom(format!("{e}, or \"auto\" or \"off\""))),
        }
    }
}

/// `remote.routes`: a table of node names to socket addresses; an error
/// names the node.
pub(super) fn routes<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, SocketAddr>, D::Error> {
    let table = BTreeMap::<String, Value>::deserialize(d)?;
    table
        .into_iter()
        .map(
            |(node, addr)| match addr.as_str().map(|a| a.trim().parse()) {
                Some(Ok(addr)) => Ok((node, addr)),
                _ => Err(D::Error::custom(format!(
                    "{node}: expected a socket address like \"10.0.0.5:2552\", found {}",
                    show(&addr)
                ))),
            },
        )
        .collect()
}
