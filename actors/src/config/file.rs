//! [`SystemConfig`] from a TOML file and `ACTORS_*` environment variables,
//! through [figment](https://docs.rs/figment).
//!
//! ```text
//!   node.toml (Toml provider)      ACTORS_MAILBOX__CAPACITY=1024 (ActorsEnv)
//!               └──────────── Figment: the last provider wins ┘
//!                                     │ extract (serde; unknown keys refused)
//!                               Settings { mailbox, remote, heartbeat, .. }
//!                                     │ Settings::validate (the rules, once)
//!                               SystemConfig (its setters check the same rules)
//! ```
//!
//! The section structs below are the only description of the keys: the
//! loader, the environment provider's key list, "did you mean" and the
//! test that holds `actors/reference.toml` to them all derive from them.
//! Errors name the dotted key and the provider its value came from (the
//! file, the variable), which figment records for every value.

use std::{
    collections::BTreeMap,
    fmt, io,
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Duration,
};

use figment::{
    Figment, Metadata, Profile, Provider, Source,
    providers::{Format, Toml},
    value::{Dict, Map, Num, Value},
};

use crate::config::SystemConfig;

mod sections;
mod values;
pub(crate) use sections::{MailboxSection, RemoteSection, Settings};
pub(crate) use values::{bytes, no_addr, none_count, unstable};

/// Prefix of the environment variables that set keys:
/// `ACTORS_<SECTION>__<KEY>`, upper-case, two underscores between section
/// and key (keys contain single underscores), as in
/// `ACTORS_REMOTE__MAX_ASSOCIATIONS=2048` for `[remote] max_associations`.
/// `ACTORS_COOKIE` (the transport's shared secret) and [`STRICT_ENV`] are
/// not keys and are left alone.
pub const ENV_PREFIX: &str = "ACTORS_";

/// `ACTORS_STRICT=1` (or `true`) makes [`SystemConfig::load`] refuse an
/// `ACTORS_*` variable that names no key; without it such a variable is
/// logged as a warning and ignored, so that an unrelated variable
/// (`ACTORS_REPO`) cannot stop a node.
pub const STRICT_ENV: &str = "ACTORS_STRICT";

/// The reference configuration (`actors/reference.toml`): every key, with
/// its default value, unit, cost and the setter it maps to. Loading it
/// yields [`SystemConfig::default`] (a test checks it, and that it names
/// exactly the keys the loader knows).
pub const REFERENCE_CONFIG: &str = include_str!("../../reference.toml");

/// The name of [`ActorsEnv`]'s figment provider.
const ENV_PROVIDER: &str = "ACTORS_* environment variables";

/// Where a configuration value came from, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigOrigin {
    /// A setter of [`SystemConfig`] called in code.
    Code,
    /// TOML text given to [`SystemConfig::from_toml_str`].
    Toml,
    /// A TOML file.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
    /// Another provider of an application's [`Figment`], by its name.
    Provider(String),
}

impl fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code => f.write_str("set in code"),
            Self::Toml => f.write_str("in the TOML text"),
            Self::File(path) => write!(f, "in {}", path.display()),
            Self::Env(var) => write!(f, "in environment variable {var}"),
            Self::Provider(name) => write!(f, "from {name}"),
        }
    }
}

/// Why a configuration could not be read, or a setting was refused. Not
/// to be confused with [`transport::ConfigError`], which the transport's
/// own setters return for settings made in code.
///
/// Messages name the key (`mailbox.capacity`), where its value came from
/// (the file, the environment variable, code) and what is wrong. No key
/// holds a secret: the shared secret comes from `ACTORS_COOKIE` or the
/// cookie file, which this module never reads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration file could not be read. Check the path and its
    /// permissions.
    #[error("cannot read configuration file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The text is not TOML. The reason gives the line and column.
    #[error("not valid TOML {origin}: {reason}")]
    Syntax {
        /// The file or text.
        origin: ConfigOrigin,
        /// The parser's message.
        reason: String,
    },
    /// A key (or, in strict mode, an `ACTORS_*` variable) that names no
    /// setting, most often a typo. `actors/reference.toml` lists every key.
    #[error(
        "unknown key \"{key}\" {origin}{}; every key is listed in actors/reference.toml",
        hint(origin, suggestion.as_deref())
    )]
    UnknownKey {
        /// The dotted key (`mailbox.capasity`); for a variable, the key
        /// its name spells.
        key: String,
        /// Where it was found.
        origin: ConfigOrigin,
        /// The known key closest to it, if one is close.
        suggestion: Option<String>,
    },
    /// A value of the wrong type, that does not parse, or out of range;
    /// or a key that needs others (the TLS files go together). The reason
    /// says what is expected.
    #[error("invalid value for \"{key}\" {origin}: {reason}")]
    InvalidValue {
        /// The dotted key.
        key: String,
        /// Where its value came from.
        origin: ConfigOrigin,
        /// What is wrong, and what is expected.
        reason: String,
    },
}

fn hint(origin: &ConfigOrigin, suggestion: Option<&str>) -> String {
    match (suggestion, origin) {
        (None, _) => String::new(),
        (Some(key), ConfigOrigin::Env(_)) => format!("; did you mean {}?", env_name(key)),
        (Some(key), _) => format!("; did you mean \"{key}\"?"),
    }
}

/// A broken rule, before the loader (or a setter) says where the value
/// came from.
#[derive(Debug)]
pub(crate) struct Invalid {
    /// The key named, unless `or` was given and `key` was not.
    pub(crate) key: &'static str,
    /// The other key of a rule about two; its origin is cited too.
    pub(crate) or: Option<&'static str>,
    /// Name `key` even when only `or` was given (a missing partner).
    pub(crate) keep_key: bool,
    pub(crate) reason: String,
}

impl Invalid {
    pub(crate) fn new(key: &'static str, reason: String) -> Self {
        Self {
            key,
            or: None,
            keep_key: false,
            reason,
        }
    }

    /// The error for a value set in code.
    pub(crate) fn in_code(self) -> ConfigError {
        ConfigError::InvalidValue {
            key: self.key.to_owned(),
            origin: ConfigOrigin::Code,
            reason: self.reason,
        }
    }
}

/// `v` within `min..=max`.
pub(crate) fn within(key: &'static str, v: u64, min: u64, max: u64) -> Result<(), Invalid> {
    if v < min {
        return Err(Invalid::new(
            key,
            format!("must be at least {min}, found {v}"),
        ));
    }
    if v > max {
        return Err(Invalid::new(
            key,
            format!("must be at most {max}, found {v}"),
        ));
    }
    Ok(())
}

/// `d` at least `min` (greater than zero when `min` is 1 ns).
pub(crate) fn at_least(key: &'static str, d: Duration, min: Duration) -> Result<(), Invalid> {
    if d >= min {
        return Ok(());
    }
    let shown = humantime::format_duration(d);
    Err(Invalid::new(
        key,
        if min == NONZERO {
            format!("must be greater than zero, found {shown}")
        } else {
            format!(
                "must be at least {}, found {shown}",
                humantime::format_duration(min)
            )
        },
    ))
}

/// Durations that must not be zero.
pub(crate) const NONZERO: Duration = Duration::from_nanos(1);

/// Every key (`section.name`) with its default value, from the structs.
pub(crate) fn known_keys() -> &'static BTreeMap<String, Value> {
    static KEYS: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let Ok(Value::Dict(_, sections)) = Value::serialize(Settings::default()) else {
            unreachable!("Settings serializes to a table of sections")
        };
        let mut keys = BTreeMap::new();
        for (section, table) in sections {
            let Value::Dict(_, table) = table else {
                unreachable!("every field of Settings is a section")
            };
            for (name, value) in table {
                keys.insert(format!("{section}.{name}"), value);
            }
        }
        keys
    })
}

/// Reading a configuration: from TOML, from the environment, from an
/// application's figment.
impl SystemConfig {
    /// The default configuration changed by the TOML `text` (sections and
    /// keys as in `actors/reference.toml`; keys left out keep their
    /// defaults).
    ///
    /// ```
    /// let config = actors::SystemConfig::from_toml_str(r#"
    ///     [mailbox]
    ///     capacity = 4096
    ///     [heartbeat]
    ///     interval = "500ms"
    /// "#)?;
    /// # let _ = config;
    /// # Ok::<(), actors::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// Not TOML, an unknown key, or an invalid value: see [`ConfigError`].
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::from_figment(&Figment::from(Toml::string(text)))
    }

    /// The default configuration changed by the TOML file at `path`.
    ///
    /// # Errors
    /// As [`from_toml_str`](Self::from_toml_str), and
    /// [`ConfigError::Read`] if the file cannot be read.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::from_figment(&Figment::from(toml_file(path.as_ref())?))
    }

    /// The configuration an operator gives a node: the defaults, changed
    /// by the TOML `file` if given, then by the process's `ACTORS_*`
    /// environment variables ([`ActorsEnv`]), which win over the file.
    /// An `ACTORS_*` variable that names no key is logged as a warning,
    /// or refused when `ACTORS_STRICT=1` ([`STRICT_ENV`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = actors::SystemConfig::load(Some("node.toml".as_ref()))?;
    /// let system = actors::ActorSystem::with_config("node", Some("0.0.0.0:2552".parse()?), config).await?;
    /// # let _ = system; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`from_toml_file`](Self::from_toml_file) and
    /// [`ActorsEnv::from_process`].
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::new();
        if let Some(path) = file {
            figment = figment.merge(toml_file(path)?);
        }
        Self::from_figment(&figment.merge(ActorsEnv::from_process()?))
    }

    /// The configuration in an application's own [`Figment`], whose root
    /// holds the sections (`mailbox`, `remote`, ...): for an application
    /// that layers its own providers (see [`from_section`](Self::from_section)
    /// to read one table of a larger file).
    ///
    /// # Errors
    /// An unknown key or an invalid value, naming the provider it came
    /// from: see [`ConfigError`].
    pub fn from_figment(figment: &Figment) -> Result<Self, ConfigError> {
        load_figment(figment, "")
    }

    /// The library's settings from one table of an application's
    /// configuration: `section` names it (`"actors"` for the `[actors]`,
    /// `[actors.mailbox]`, ... tables of `app.toml`), and errors name
    /// keys with it (`actors.mailbox.capacity`). The environment is not
    /// read; merge [`ActorsEnv`] into the focused figment for that.
    ///
    /// ```
    /// use actors::figment::{Figment, providers::{Format, Toml}};
    /// let app = Figment::from(Toml::string(r#"
    ///     [app]
    ///     greeting = "hello"
    ///     [actors.mailbox]
    ///     capacity = 4096
    /// "#));
    /// let config = actors::SystemConfig::from_section(&app, "actors")?;
    /// // The variables too, on top of the section:
    /// let env = actors::ActorsEnv::from_vars([], false)?;
    /// let config = actors::SystemConfig::from_figment(&app.focus("actors").merge(env))?;
    /// # let _ = config;
    /// # Ok::<(), actors::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// As [`from_figment`](Self::from_figment).
    pub fn from_section(figment: &Figment, section: &str) -> Result<Self, ConfigError> {
        load_figment(&figment.focus(section), section)
    }

    /// Checks every setting this configuration holds against the rules
    /// the loader applies: the setters that can be given an invalid value
    /// run it, so a `SystemConfig` is always valid. (The transport's
    /// settings are checked by their own setters, on
    /// [`transport_mut`](Self::transport_mut).)
    ///
    /// # Errors
    /// The first setting out of range, as [`ConfigError::InvalidValue`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        MailboxSection::of(self)
            .validate()
            .and_then(|()| RemoteSection::of(self).validate())
            .and_then(|()| self.cluster.validate())
            .map_err(Invalid::in_code)
    }
}

/// A TOML file as a figment provider, or why it cannot be read (figment
/// alone would read a missing file as an empty one).
fn toml_file(path: &Path) -> Result<figment::providers::Data<Toml>, ConfigError> {
    std::fs::metadata(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(Toml::file(path))
}

/// Extracts, validates and builds; `prefix` (a section of an application's
/// file) is put before the keys errors name.
fn load_figment(figment: &Figment, prefix: &str) -> Result<SystemConfig, ConfigError> {
    let dotted = |key: &str| match prefix {
        "" => key.to_owned(),
        p => format!("{p}.{key}"),
    };
    let settings: Settings = figment
        .extract()
        .map_err(|e| figment_error(e, figment, &dotted))?;
    settings.validate().map_err(|invalid| {
        let given = |key: &str| figment.find_metadata(key).map(|m| origin(m, key));
        let named =
            match invalid.or {
                Some(or) if given(invalid.key).is_none() && given(or).is_some() => {
                    if invalid.keep_key { invalid.key } else { or }
                }
                _ => invalid.key,
            };
        let at = given(named)
            .or_else(|| invalid.or.and_then(given))
            .unwrap_or(ConfigOrigin::Code);
        let mut reason = invalid.reason;
        if let Some(or) = invalid.or.filter(|or| *or != named)
            && let Some(other) = given(or)
        {
            reason = format!("{reason} ({other})");
        }
        ConfigError::InvalidValue {
            key: dotted(named),
            origin: at,
            reason,
        }
    })?;
    Ok(settings.into_config())
}

/// Where figment says a value came from.
fn origin(metadata: &Metadata, key: &str) -> ConfigOrigin {
    match (&metadata.source, metadata.name.as_ref()) {
        (Some(Source::File(path)), _) => ConfigOrigin::File(path.clone()),
        (_, ENV_PROVIDER) => ConfigOrigin::Env(env_name(key)),
        (None, "TOML source string") => ConfigOrigin::Toml,
        (_, name) => ConfigOrigin::Provider(name.to_owned()),
    }
}

/// A figment error as ours: the key from its path, the origin from its
/// metadata.
fn figment_error(
    e: figment::Error,
    figment: &Figment,
    dotted: &dyn Fn(&str) -> String,
) -> ConfigError {
    use figment::error::Kind;
    let mut key = e.path.join(".");
    let at = e
        .metadata
        .as_ref()
        .map_or(ConfigOrigin::Code, |m| origin(m, &key));
    match &e.kind {
        Kind::UnknownField(..) => {
            // An unknown table: name its first key (`mailboxes.capacity`),
            // which is nearer to the key meant than the table alone.
            if e.path.len() == 1
                && let Ok(Value::Dict(_, table)) = figment.find_value(&key)
                && let Some(first) = table.keys().next()
            {
                key = format!("{key}.{first}");
            }
            ConfigError::UnknownKey {
                suggestion: nearest_key(&key).map(dotted),
                key: dotted(&key),
                origin: at,
            }
        }
        // A provider that failed to produce data: a file that is not TOML.
        Kind::Message(reason) if e.path.is_empty() => ConfigError::Syntax {
            origin: e
                .metadata
                .as_ref()
                .map_or(ConfigOrigin::Toml, |m| origin(m, "")),
            reason: reason.trim_end().to_owned(),
        },
        kind => {
            let at = figment.find_metadata(&key).map_or(at, |m| origin(m, &key));
            ConfigError::InvalidValue {
                key: dotted(&key),
                origin: at,
                reason: kind.to_string(),
            }
        }
    }
}

/// The `ACTORS_<SECTION>__<KEY>` environment variables as a figment
/// provider: values are written as in TOML without quotes (`500ms`,
/// `64MiB`, `true`); lists are comma-separated (`10.0.0.0/8,127.0.0.1/32`),
/// routes `node=addr,node=addr`. `ACTORS_COOKIE` and `ACTORS_STRICT` are
/// not keys and are skipped; other variables that name no key are logged
/// (`warn`, with the nearest key) and skipped, or refused in strict mode.
#[derive(Debug, Clone)]
pub struct ActorsEnv {
    sections: Dict,
}

impl ActorsEnv {
    /// The process's `ACTORS_*` variables; strict when `ACTORS_STRICT` is
    /// `1` or `true`.
    ///
    /// # Errors
    /// In strict mode, a variable that names no key
    /// ([`ConfigError::UnknownKey`]); an `ACTORS_*` variable whose value
    /// is not UTF-8 ([`ConfigError::InvalidValue`]).
    pub fn from_process() -> Result<Self, ConfigError> {
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            // Other programs' variables may be anything; only ours must be
            // text.
            let Some(name) = name.to_str().filter(|n| n.starts_with(ENV_PREFIX)) else {
                continue;
            };
            let value = value.into_string().map_err(|_| ConfigError::InvalidValue {
                key: env_key_spelling(name),
                origin: ConfigOrigin::Env(name.to_owned()),
                reason: "the value is not UTF-8".into(),
            })?;
            vars.push((name.to_owned(), value));
        }
        let strict = vars
            .iter()
            .any(|(n, v)| n == STRICT_ENV && matches!(v.trim(), "1" | "true"));
        Self::from_vars(vars, strict)
    }

    /// The `ACTORS_*` variables among `vars` (name, value); others are
    /// ignored.
    ///
    /// # Errors
    /// With `strict`, a variable that names no key.
    pub fn from_vars<I>(vars: I, strict: bool) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut vars: Vec<_> = vars
            .into_iter()
            .filter(|(name, _)| {
                name.starts_with(ENV_PREFIX) && name != transport::COOKIE_ENV && name != STRICT_ENV
            })
            .collect();
        // The process environment has no order; errors should not depend on it.
        vars.sort();
        let mut sections = Dict::new();
        for (name, text) in vars {
            let key = env_key_spelling(&name);
            let Some(default) = known_keys().get(&key) else {
                let suggestion = nearest_key(&key).map(str::to_owned);
                if strict {
                    return Err(ConfigError::UnknownKey {
                        key,
                        origin: ConfigOrigin::Env(name),
                        suggestion,
                    });
                }
                let suggestion = suggestion.as_deref().map(env_name);
                tracing::warn!(
                    variable = %name,
                    did_you_mean = suggestion.as_deref().unwrap_or("-"),
                    "ignoring an ACTORS_* variable that names no configuration key \
                     (set ACTORS_STRICT=1 to refuse it)"
                );
                continue;
            };
            let (section, field) = key.split_once('.').expect("known keys are section.name");
            let Value::Dict(_, table) = sections
                .entry(section.to_owned())
                .or_insert_with(|| Value::from(Dict::new()))
            else {
                unreachable!("sections are tables")
            };
            table.insert(field.to_owned(), env_value(&key, default, &text));
        }
        Ok(Self { sections })
    }
}

impl Provider for ActorsEnv {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_PROVIDER)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.sections.clone()))
    }
}

/// A variable's text as the value its key takes, by the type of the key's
/// default: lists and tables split at commas, numbers and booleans parsed
/// when they parse (else left as text, for the key's own error).
fn env_value(key: &str, default: &Value, text: &str) -> Value {
    let list = || {
        let items: Vec<Value> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Value::from)
            .collect();
        Value::from(items)
    };
    match default {
        Value::Array(..) => list(),
        Value::String(..) if key == "remote.dial_allow_list" && text.trim() != "any" => list(),
        Value::Dict(..) => {
            let mut dict = Dict::new();
            for pair in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                dict.insert(k.trim().to_owned(), Value::from(v.trim()));
            }
            Value::from(dict)
        }
        Value::Num(_, n) => {
            let t = text.trim().replace('_', "");
            let float = matches!(n, Num::F32(_) | Num::F64(_));
            match (t.parse::<u64>(), t.parse::<i64>(), t.parse::<f64>()) {
                (Ok(u), _, _) if !float => Value::from(u),
                (_, Ok(i), _) if !float => Value::from(i),
                (_, _, Ok(f)) if float => Value::from(f),
                _ => Value::from(text),
            }
        }
        Value::Bool(..) => match text.trim() {
            "true" => Value::from(true),
            "false" => Value::from(false),
            _ => Value::from(text),
        },
        _ => Value::from(text),
    }
}

/// `mailbox.capacity` → `ACTORS_MAILBOX__CAPACITY`.
fn env_name(dotted: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        dotted.replacen('.', "__", 1).to_uppercase()
    )
}

/// `ACTORS_MAILBOX__CAPASITY` → `mailbox.capasity`, the key a variable
/// spells.
fn env_key_spelling(var: &str) -> String {
    var.strip_prefix(ENV_PREFIX)
        .unwrap_or(var)
        .replacen("__", ".", 1)
        .to_lowercase()
}

/// The known key closest to `key`, if at most a few edits away.
fn nearest_key(key: &str) -> Option<&'static str> {
    let (distance, best) = known_keys()
        .keys()
        .map(|k| (edit_distance(key, k), k.as_str()))
        .min_by_key(|&(d, _)| d)?;
    (distance <= 3.max(key.len() / 5)).then_some(best)
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests;
