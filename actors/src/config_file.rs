//! [`SystemConfig`] from a TOML file and `ACTORS_*` environment variables.
//!
//! ```text
//!   node.toml:  [mailbox]                 ACTORS_MAILBOX__CAPACITY=1024
//!               capacity = 4096           ACTORS_HEARTBEAT__INTERVAL=500ms
//!                    │                                │
//!                    └──── Entry { key, raw, origin } ┘   file first, then the
//!                                     │                   environment: the last wins
//!                          Key::apply (parse, range) ──► SystemConfig setters
//!                                     │
//!                          finish(): TLS files and reconnect backoff,
//!                          whose keys only make sense together
//! ```
//!
//! One table, `KEYS`, names every key: the TOML parser, the environment
//! variable names and the tests all read it, and a test checks that
//! `actors/reference.toml` documents each of its keys with its default, so
//! a setting cannot be added here without being documented there. A key
//! that is not in the table is an error that names it (with the nearest
//! key, if one is close), never ignored.
//!
//! TOML is parsed into a generic table rather than through
//! `#[derive(Deserialize)]` structs with `deny_unknown_fields`: the one
//! table then serves files and variables alike, and errors name the whole
//! dotted key (`mailbox.capasity`) rather than a field of some section.

use std::{
    fmt, io,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use ipnet::IpNet;
use transport::Backoff;

use crate::config::{
    ClusterSettings, Downing, MAX_CLUSTER_EVENT_CAPACITY, MAX_CLUSTER_PACKET_SIZE,
    MIN_CLUSTER_PACKET_SIZE, MIN_CLUSTER_PERIOD, SystemConfig,
};

/// Prefix of the environment variables that set keys:
/// `ACTORS_<SECTION>__<KEY>`, upper-case, two underscores between section
/// and key (keys contain single underscores), as in
/// `ACTORS_REMOTE__MAX_ASSOCIATIONS=2048` for `[remote] max_associations`.
/// `ACTORS_COOKIE`, the transport's shared secret, is not a key and is left
/// alone.
pub const ENV_PREFIX: &str = "ACTORS_";

/// The reference configuration (`actors/reference.toml`): every key, with
/// its default value, unit, cost and the setter it maps to. Loading it
/// yields [`SystemConfig::default`] (a test checks it).
pub const REFERENCE_CONFIG: &str = include_str!("../reference.toml");

/// Where a configuration value came from, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigOrigin {
    /// TOML text given to [`SystemConfig::from_toml_str`].
    Toml,
    /// A TOML file.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
}

impl fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Toml => f.write_str("in the TOML text"),
            Self::File(path) => write!(f, "in {}", path.display()),
            Self::Env(var) => write!(f, "in environment variable {var}"),
        }
    }
}

/// Why a configuration could not be read. Not to be confused with
/// [`transport::ConfigError`], which an endpoint returns at bind for
/// settings made in code.
///
/// Messages name the key (`mailbox.capacity`), where its value came from
/// (the file or the environment variable) and what is wrong. No key holds
/// a secret: the shared secret comes from `ACTORS_COOKIE` or the cookie
/// file, which this module never reads.
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
    /// A key (or an `ACTORS_*` variable) that names no setting, most often
    /// a typo. `actors/reference.toml` lists every key.
    #[error(
        "unknown key \"{key}\" {origin}{}; every key is listed in actors/reference.toml",
        hint(origin, *suggestion)
    )]
    UnknownKey {
        /// The dotted key (`mailbox.capasity`); for a variable, the key
        /// its name spells.
        key: String,
        /// Where it was found.
        origin: ConfigOrigin,
        /// The known key closest to it, if one is close.
        suggestion: Option<&'static str>,
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

fn hint(origin: &ConfigOrigin, suggestion: Option<&'static str>) -> String {
    match (suggestion, origin) {
        (None, _) => String::new(),
        (Some(key), ConfigOrigin::Env(_)) => format!("; did you mean {}?", env_name(key)),
        (Some(key), _) => format!("; did you mean \"{key}\"?"),
    }
}

/// Reading a configuration: from TOML, from the environment, or both.
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
        let mut config = Self::default();
        config.apply(toml_entries(text, ConfigOrigin::Toml)?)?;
        Ok(config)
    }

    /// The default configuration changed by the TOML file at `path`.
    ///
    /// # Errors
    /// As [`from_toml_str`](Self::from_toml_str), and
    /// [`ConfigError::Read`] if the file cannot be read.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        config.apply(file_entries(path.as_ref())?)?;
        Ok(config)
    }

    /// Applies the `ACTORS_<SECTION>__<KEY>` variables among `vars` (name,
    /// value) on top of this configuration (see [`ENV_PREFIX`]). Other
    /// variables, and `ACTORS_COOKIE`, are ignored. Values are written as
    /// in TOML without quotes (`500ms`, `64MiB`, `true`); lists are
    /// comma-separated (`10.0.0.0/8,127.0.0.1/32`), routes
    /// `node=addr,node=addr`. All or nothing: on an error, `self` is
    /// unchanged.
    ///
    /// ```
    /// let mut config = actors::SystemConfig::default();
    /// config.apply_env([("ACTORS_MAILBOX__CAPACITY".to_owned(), "1024".to_owned())])?;
    /// # Ok::<(), actors::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// An `ACTORS_*` variable that names no key (other than
    /// `ACTORS_COOKIE`), or an invalid value: see [`ConfigError`].
    pub fn apply_env<I>(&mut self, vars: I) -> Result<(), ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        self.apply(env_entries(vars)?)
    }

    /// The configuration an operator gives a node: the defaults, changed
    /// by the TOML `file` if given, then by the process's `ACTORS_*`
    /// environment variables, which win over the file.
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
    /// [`apply_env`](Self::apply_env); an `ACTORS_*` variable whose value
    /// is not UTF-8 is an invalid value.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            // Other programs' variables may be anything; only ours must be
            // text.
            let Some(name) = name.to_str().filter(|n| n.starts_with(ENV_PREFIX)) else {
                continue;
            };
            if name == transport::COOKIE_ENV {
                continue;
            }
            let value = value.into_string().map_err(|_| ConfigError::InvalidValue {
                key: env_key_spelling(name),
                origin: ConfigOrigin::Env(name.to_owned()),
                reason: "the value is not UTF-8".into(),
            })?;
            vars.push((name.to_owned(), value));
        }
        load_from(file, vars)
    }

    /// Applies `entries` in order, all or nothing.
    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), ConfigError> {
        let mut config = self.clone();
        let mut staged = Staged::new(&mut config);
        for entry in entries {
            staged.origin = entry.origin;
            entry
                .key
                .kind
                .apply(&mut staged, &entry.raw)
                .map_err(|reason| ConfigError::InvalidValue {
                    key: entry.key.key.to_owned(),
                    origin: staged.origin.clone(),
                    reason,
                })?;
        }
        staged.finish()?;
        *self = config;
        Ok(())
    }
}

/// `file`, then `vars`, on the defaults, in one pass so that keys that go
/// together (the TLS files) may come from both.
fn load_from(
    file: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<SystemConfig, ConfigError> {
    let mut entries = match file {
        Some(path) => file_entries(path)?,
        None => Vec::new(),
    };
    entries.extend(env_entries(vars)?);
    let mut config = SystemConfig::default();
    config.apply(entries)?;
    Ok(config)
}

/// One value for one key.
struct Entry {
    key: &'static Key,
    raw: Raw,
    origin: ConfigOrigin,
}

/// A value as written: TOML keeps its type, a variable is text.
enum Raw {
    Toml(toml::Value),
    Env(String),
}

fn file_entries(path: &Path) -> Result<Vec<Entry>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml_entries(&text, ConfigOrigin::File(path.to_owned()))
}

fn toml_entries(text: &str, origin: ConfigOrigin) -> Result<Vec<Entry>, ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            origin: origin.clone(),
            reason: e.to_string().trim_end().to_owned(),
        })?;
    let unknown = |key: String| ConfigError::UnknownKey {
        suggestion: nearest_key(&key),
        key,
        origin: origin.clone(),
    };
    let mut entries = Vec::new();
    for (section, value) in table {
        let toml::Value::Table(keys) = value else {
            // A key outside any section.
            return Err(unknown(section));
        };
        if keys.is_empty() && !KEYS.iter().any(|k| k.section() == section) {
            return Err(unknown(section));
        }
        for (name, raw) in keys {
            let Some(key) = KEYS
                .iter()
                .find(|k| k.split() == (section.as_str(), name.as_str()))
            else {
                return Err(unknown(format!("{section}.{name}")));
            };
            entries.push(Entry {
                key,
                raw: Raw::Toml(raw),
                origin: origin.clone(),
            });
        }
    }
    Ok(entries)
}

fn env_entries(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Entry>, ConfigError> {
    let mut vars: Vec<_> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX) && name != transport::COOKIE_ENV)
        .collect();
    // The process environment has no order; errors should not depend on it.
    vars.sort();
    let mut entries = Vec::new();
    for (name, value) in vars {
        let Some(key) = KEYS.iter().find(|k| env_name(k.key) == name) else {
            let key = env_key_spelling(&name);
            return Err(ConfigError::UnknownKey {
                suggestion: nearest_key(&key),
                key,
                origin: ConfigOrigin::Env(name),
            });
        };
        entries.push(Entry {
            key,
            raw: Raw::Env(value),
            origin: ConfigOrigin::Env(name),
        });
    }
    Ok(entries)
}

/// `mailbox.capacity` → `ACTORS_MAILBOX__CAPACITY`.
fn env_name(dotted: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        dotted.replacen('.', "__", 1).to_uppercase()
    )
}

/// `ACTORS_MAILBOX__CAPASITY` → `mailbox.capasity`, the key a variable
/// spells, for error messages.
fn env_key_spelling(var: &str) -> String {
    var.strip_prefix(ENV_PREFIX)
        .unwrap_or(var)
        .replacen("__", ".", 1)
        .to_lowercase()
}

/// The known key closest to `key`, if at most a few edits away.
fn nearest_key(key: &str) -> Option<&'static str> {
    let (distance, best) = KEYS
        .iter()
        .map(|k| (edit_distance(key, k.key), k.key))
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

/// A configuration being changed, with the keys that only make sense
/// together held back until [`finish`](Self::finish).
struct Staged<'a> {
    config: &'a mut SystemConfig,
    /// Origin of the entry being applied.
    origin: ConfigOrigin,
    tls_cert_chain: Option<(String, ConfigOrigin)>,
    tls_private_key: Option<(String, ConfigOrigin)>,
    tls_ca_certificates: Option<(String, ConfigOrigin)>,
    tls_client_auth: Option<(bool, ConfigOrigin)>,
    tls_allow_host_only: Option<(bool, ConfigOrigin)>,
    backoff_min: Option<(Duration, ConfigOrigin)>,
    backoff_max: Option<(Duration, ConfigOrigin)>,
    backoff_jitter: Option<f64>,
    cluster: ClusterGiven,
}

/// What `client_auth` and `allow_host_only_certificates` are when TLS is
/// off: their defaults may be written without TLS files.
const TLS_CLIENT_AUTH_DEFAULT: bool = true;
const TLS_ALLOW_HOST_ONLY_DEFAULT: bool = false;

impl<'a> Staged<'a> {
    fn new(config: &'a mut SystemConfig) -> Self {
        Self {
            config,
            origin: ConfigOrigin::Toml,
            tls_cert_chain: None,
            tls_private_key: None,
            tls_ca_certificates: None,
            tls_client_auth: None,
            tls_allow_host_only: None,
            backoff_min: None,
            backoff_max: None,
            backoff_jitter: None,
            cluster: ClusterGiven::default(),
        }
    }

    fn here<T>(&self, value: T) -> Option<(T, ConfigOrigin)> {
        Some((value, self.origin.clone()))
    }

    fn finish(self) -> Result<(), ConfigError> {
        let Self {
            config,
            tls_cert_chain,
            tls_private_key,
            tls_ca_certificates,
            tls_client_auth,
            tls_allow_host_only,
            backoff_min,
            backoff_max,
            backoff_jitter,
            cluster,
            ..
        } = self;
        check_cluster(&config.cluster, &cluster)?;
        let invalid = |key: &str, origin: &ConfigOrigin, reason: String| {
            Err(ConfigError::InvalidValue {
                key: key.to_owned(),
                origin: origin.clone(),
                reason,
            })
        };

        // Reconnect backoff: any part given replaces that part.
        if backoff_min.is_some() || backoff_max.is_some() || backoff_jitter.is_some() {
            let current = &config.backoff;
            let min = backoff_min.as_ref().map_or(current.min(), |(d, _)| *d);
            let max = backoff_max.as_ref().map_or(current.max(), |(d, _)| *d);
            if max < min {
                let (key, origin) = match (&backoff_max, &backoff_min) {
                    (Some((_, origin)), _) => ("reconnect_backoff.max", origin),
                    (None, Some((_, origin))) => ("reconnect_backoff.min", origin),
                    (None, None) => unreachable!("max < min needs one of them changed"),
                };
                return invalid(
                    key,
                    origin,
                    format!(
                        "max {} is below min {}",
                        humantime::format_duration(max),
                        humantime::format_duration(min)
                    ),
                );
            }
            config.backoff = Backoff::new(min, max, backoff_jitter.unwrap_or(current.jitter()));
        }

        // TLS: the three files together, or none. Empty means not given.
        let files = [
            ("tls.cert_chain", &tls_cert_chain),
            ("tls.private_key", &tls_private_key),
            ("tls.ca_certificates", &tls_ca_certificates),
        ];
        let given: Vec<_> = files
            .iter()
            .filter_map(|(key, v)| match v {
                Some((path, origin)) if !path.is_empty() => Some((*key, path, origin)),
                _ => None,
            })
            .collect();
        if let Some(&(set_key, _, origin)) = given.first() {
            if let Some((missing, _)) = files
                .iter()
                .find(|(key, _)| !given.iter().any(|(k, _, _)| k == key))
            {
                return invalid(
                    missing,
                    origin,
                    format!(
                        "missing: {set_key} is set, and TLS needs tls.cert_chain, \
                         tls.private_key and tls.ca_certificates"
                    ),
                );
            }
            #[cfg(feature = "tls")]
            {
                config.tls = Some(transport::TlsConfig::from_pem_files(
                    given[0].1, given[1].1, given[2].1,
                ));
            }
            #[cfg(not(feature = "tls"))]
            return invalid(
                set_key,
                origin,
                "this build has no TLS (the actors crate's `tls` feature is off)".into(),
            );
        }
        for (key, flag, default) in [
            ("tls.client_auth", &tls_client_auth, TLS_CLIENT_AUTH_DEFAULT),
            (
                "tls.allow_host_only_certificates",
                &tls_allow_host_only,
                TLS_ALLOW_HOST_ONLY_DEFAULT,
            ),
        ] {
            let Some((on, origin)) = flag else { continue };
            #[cfg(feature = "tls")]
            if let Some(tls) = config.tls.as_mut() {
                if key == "tls.client_auth" {
                    tls.set_client_auth(*on);
                } else {
                    tls.set_allow_host_only_certificates(*on);
                }
                continue;
            }
            if *on != default {
                return invalid(
                    key,
                    origin,
                    "TLS is off: set tls.cert_chain, tls.private_key and tls.ca_certificates"
                        .into(),
                );
            }
        }
        Ok(())
    }
}

/// Where the `[cluster]` keys that are checked together got their values
/// in this pass (`None`: not given, unchanged).
#[derive(Default)]
struct ClusterGiven {
    probe_period: Option<ConfigOrigin>,
    probe_rtt: Option<ConfigOrigin>,
    downing: Option<ConfigOrigin>,
    quorum_size: Option<ConfigOrigin>,
    down_if_alone: Option<ConfigOrigin>,
}

/// The `[cluster]` keys that only make sense together, once all are in:
/// the probe's answer within half its period (foca would otherwise take
/// the half silently), and the downing strategy's parameters with their
/// strategy. A check runs only when one of its keys was given, and names
/// the key given (`probe_rtt` before `probe_period`, the parameter before
/// `downing`).
fn check_cluster(cluster: &ClusterSettings, given: &ClusterGiven) -> Result<(), ConfigError> {
    let blame = |first: (&str, &Option<ConfigOrigin>), second: (&str, &Option<ConfigOrigin>)| {
        [first, second]
            .into_iter()
            .find_map(|(key, origin)| Some((key.to_owned(), origin.clone()?)))
    };
    let invalid = |(key, origin): (String, ConfigOrigin), reason: String| {
        Err(ConfigError::InvalidValue {
            key,
            origin,
            reason,
        })
    };
    if cluster.probe_rtt > cluster.probe_period / 2
        && let Some(at) = blame(
            ("cluster.probe_rtt", &given.probe_rtt),
            ("cluster.probe_period", &given.probe_period),
        )
    {
        return invalid(
            at,
            format!(
                "probe_rtt {} must be at most half of probe_period {}",
                humantime::format_duration(cluster.probe_rtt),
                humantime::format_duration(cluster.probe_period)
            ),
        );
    }
    let downing = format!(
        "downing is \"{}\"{}",
        cluster.downing.name(),
        given
            .downing
            .as_ref()
            .map_or(String::new(), |origin| format!(" ({origin})"))
    );
    let quorum = ("cluster.quorum_size", &given.quorum_size);
    let alone = ("cluster.down_if_alone", &given.down_if_alone);
    let strategy = ("cluster.downing", &given.downing);
    let static_quorum = cluster.downing == Downing::StaticQuorum;
    if static_quorum
        && cluster.quorum_size.is_none()
        && let Some((_, origin)) = blame(strategy, quorum)
    {
        return invalid(
            ("cluster.quorum_size".to_owned(), origin),
            "missing: downing \"static-quorum\" needs quorum_size, the members a side \
             needs to survive"
                .to_owned(),
        );
    }
    if !static_quorum
        && cluster.quorum_size.is_some()
        && let Some(at) = blame(quorum, strategy)
    {
        return invalid(
            at,
            format!("quorum_size is for downing \"static-quorum\" only; {downing}"),
        );
    }
    if !cluster.down_if_alone
        && cluster.downing != Downing::KeepOldest
        && let Some(at) = blame(alone, strategy)
    {
        return invalid(
            at,
            format!("down_if_alone = false is for downing \"keep-oldest\" only; {downing}"),
        );
    }
    Ok(())
}

/// `"10.0.0.1:2552"`, `"seed.example:2552"`, `"[::1]:2552"`: a seed must
/// have a host and a port (its name is resolved at join).
fn seed(text: &str) -> Result<(), String> {
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(format!(
            "expected seeds like \"10.0.0.1:2552\" or \"seed.example:2552\" (host:port), \
             found {text:?}"
        )),
    }
}

/// `""` for none, or a socket address.
fn socket_addr_or_none(text: &str) -> Result<Option<SocketAddr>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        format!(
            "expected a socket address like \"0.0.0.0:2552\" (or \"\" for none), found {text:?}"
        )
    })
}

/// One key: where it lives, what it sets, how its value is read.
struct Key {
    /// `section.name`.
    key: &'static str,
    /// The field it sets, as `{:?}` of [`SystemConfig`] names it (for the
    /// test that every field has a key).
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the tests"))]
    field: &'static str,
    /// The setter it maps to (the reference file names it; a test checks).
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the tests"))]
    setter: &'static str,
    kind: Kind,
}

impl Key {
    /// The section (`mailbox` of `mailbox.capacity`).
    fn section(&self) -> &'static str {
        self.split().0
    }

    /// `(section, name)`.
    fn split(&self) -> (&'static str, &'static str) {
        self.key
            .split_once('.')
            .expect("every key is section.name (checked by a test)")
    }
}

/// Whether an integer is a count or a size in bytes (which may also be
/// written `"64MiB"`).
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Count,
    Bytes,
}

type SetFn<T> = fn(&mut Staged<'_>, T);
type TrySetFn<T> = fn(&mut Staged<'_>, T) -> Result<(), String>;

/// How a key's value is read and checked, and the setter it goes to.
enum Kind {
    Int {
        unit: Unit,
        min: u64,
        max: u64,
        set: SetFn<u64>,
    },
    /// An integer, or the word `none` for `None`.
    OptInt {
        unit: Unit,
        none: &'static str,
        min: u64,
        max: u64,
        set: SetFn<Option<u64>>,
    },
    Duration {
        min: Duration,
        set: SetFn<Duration>,
    },
    /// A duration, or the word `none` for `None`.
    OptDuration {
        none: &'static str,
        set: SetFn<Option<Duration>>,
    },
    Float {
        check: fn(f64) -> Result<(), &'static str>,
        set: SetFn<f64>,
    },
    Bool {
        set: SetFn<bool>,
    },
    Text {
        set: TrySetFn<String>,
    },
    /// A list of strings; with `none`, that word means `None`.
    List {
        none: Option<&'static str>,
        set: TrySetFn<Option<Vec<String>>>,
    },
    /// A table of strings.
    Map {
        set: TrySetFn<Vec<(String, String)>>,
    },
}

impl Kind {
    fn apply(&self, s: &mut Staged<'_>, raw: &Raw) -> Result<(), String> {
        match *self {
            Self::Int {
                unit,
                min,
                max,
                set,
            } => set(s, int(raw, unit, min, max)?),
            Self::OptInt {
                unit,
                none,
                min,
                max,
                set,
            } => {
                let value = if word(raw) == Some(none) {
                    None
                } else {
                    Some(int(raw, unit, min, max).map_err(|e| format!("{e}, or \"{none}\""))?)
                };
                set(s, value);
            }
            Self::Duration { min, set } => set(s, duration(raw, min)?),
            Self::OptDuration { none, set } => {
                let value = if word(raw) == Some(none) {
                    None
                } else {
                    Some(duration(raw, Duration::ZERO).map_err(|e| format!("{e}, or \"{none}\""))?)
                };
                set(s, value);
            }
            Self::Float { check, set } => {
                let v = match raw {
                    Raw::Toml(toml::Value::Float(f)) => *f,
                    // 10 is a fine way to write 10.0.
                    Raw::Toml(toml::Value::Integer(i)) => *i as f64,
                    Raw::Env(text) => text
                        .trim()
                        .parse()
                        .map_err(|_| format!("expected a number, found {text:?}"))?,
                    Raw::Toml(other) => return Err(expected("a number", other)),
                };
                check(v).map_err(|e| format!("{e}, found {v}"))?;
                set(s, v);
            }
            Self::Bool { set } => {
                let v = match raw {
                    Raw::Toml(toml::Value::Boolean(b)) => *b,
                    Raw::Env(text) => match text.trim() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(format!("expected true or false, found {text:?}")),
                    },
                    Raw::Toml(other) => return Err(expected("true or false", other)),
                };
                set(s, v);
            }
            Self::Text { set } => set(s, text(raw)?.to_owned())?,
            Self::List { none, set } => {
                let list = if none.is_some() && word(raw) == none {
                    None
                } else {
                    Some(match raw {
                        Raw::Toml(toml::Value::Array(items)) => items
                            .iter()
                            .map(|v| match v {
                                toml::Value::String(s) => Ok(s.clone()),
                                other => Err(expected("an array of strings", other)),
                            })
                            .collect::<Result<_, _>>()?,
                        Raw::Env(text) => text
                            .split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                            .collect(),
                        Raw::Toml(other) => {
                            let what = match none {
                                Some(none) => format!("an array of strings or \"{none}\""),
                                None => "an array of strings".into(),
                            };
                            return Err(expected(&what, other));
                        }
                    })
                };
                set(s, list)?;
            }
            Self::Map { set } => {
                let pairs = match raw {
                    Raw::Toml(toml::Value::Table(table)) => table
                        .iter()
                        .map(|(k, v)| match v {
                            toml::Value::String(s) => Ok((k.clone(), s.clone())),
                            other => Err(format!("{k}: {}", expected("a string", other))),
                        })
                        .collect::<Result<_, _>>()?,
                    Raw::Env(text) => text
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(|pair| {
                            pair.split_once('=')
                                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                                .ok_or_else(|| format!("expected key=value, found {pair:?}"))
                        })
                        .collect::<Result<_, _>>()?,
                    Raw::Toml(other) => return Err(expected("a table of strings", other)),
                };
                set(s, pairs)?;
            }
        }
        Ok(())
    }
}

/// The value as a bare word, if it is a string.
fn word(raw: &Raw) -> Option<&str> {
    match raw {
        Raw::Toml(toml::Value::String(s)) => Some(s.trim()),
        Raw::Env(s) => Some(s.trim()),
        Raw::Toml(_) => None,
    }
}

fn text(raw: &Raw) -> Result<&str, String> {
    match raw {
        Raw::Toml(toml::Value::String(s)) | Raw::Env(s) => Ok(s),
        Raw::Toml(other) => Err(expected("a string", other)),
    }
}

/// "expected X, found string \"lots\"".
fn expected(what: &str, found: &toml::Value) -> String {
    let shown = match found {
        toml::Value::String(s) => format!("string {s:?}"),
        toml::Value::Integer(i) => format!("integer {i}"),
        toml::Value::Float(f) => format!("float {f}"),
        toml::Value::Boolean(b) => format!("boolean {b}"),
        other => other.type_str().to_owned(),
    };
    format!("expected {what}, found {shown}")
}

fn int(raw: &Raw, unit: Unit, min: u64, max: u64) -> Result<u64, String> {
    let what = match unit {
        Unit::Count => "an integer",
        Unit::Bytes => "a size in bytes (an integer, or a string like \"64MiB\")",
    };
    let v = match raw {
        Raw::Toml(toml::Value::Integer(i)) => {
            u64::try_from(*i).map_err(|_| format!("must not be negative, found {i}"))?
        }
        Raw::Toml(toml::Value::String(s)) if unit == Unit::Bytes => size(s)?,
        Raw::Env(s) => match unit {
            Unit::Count => s
                .trim()
                .replace('_', "")
                .parse()
                .map_err(|_| format!("expected {what}, found {s:?}"))?,
            Unit::Bytes => size(s)?,
        },
        Raw::Toml(other) => return Err(expected(what, other)),
    };
    if v < min || v > max {
        return Err(if v < min {
            format!("must be at least {min}, found {v}")
        } else {
            format!("must be at most {max}, found {v}")
        });
    }
    Ok(v)
}

/// `"65536"`, `"64KiB"`, `"4 MiB"`, `"1GiB"`: bytes, binary units only.
fn size(text: &str) -> Result<u64, String> {
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

fn duration(raw: &Raw, min: Duration) -> Result<Duration, String> {
    match raw {
        Raw::Toml(toml::Value::String(s)) | Raw::Env(s) => duration_text(s, min),
        Raw::Toml(other) => Err(expected(
            "a duration with a unit, like \"100ms\" or \"10s\"",
            other,
        )),
    }
}

/// `text` as a duration of at least `min`.
fn duration_text(text: &str, min: Duration) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("expected a duration like \"100ms\", \"10s\" or \"1m 30s\", found {text:?} ({e})")
    })?;
    if d < min {
        return Err(if min == Duration::from_nanos(1) {
            format!("must be greater than zero, found {text:?}")
        } else {
            format!(
                "must be at least {}, found {text:?}",
                humantime::format_duration(min)
            )
        });
    }
    Ok(d)
}

/// A usize setting's upper bound (on 64-bit targets, `u64::MAX`).
const USIZE: u64 = usize::MAX as u64;
const U32: u64 = u32::MAX as u64;
/// Durations that must not be zero.
const NONZERO: Duration = Duration::from_nanos(1);

/// `n` as usize: every `Int` key's `max` is at most [`USIZE`], so the
/// conversion cannot fail once the value is range-checked.
fn us(n: u64) -> usize {
    usize::try_from(n).expect("range-checked against usize::MAX")
}

/// `n` as u32: keys that end in a `u32` setter have `max: U32`.
fn u32_of(n: u64) -> u32 {
    u32::try_from(n).expect("range-checked against u32::MAX")
}

/// Every key, by section, in the order of `actors/reference.toml`.
static KEYS: &[Key] = &[
    // [mailbox]
    Key {
        key: "mailbox.capacity",
        field: "mailbox_capacity",
        setter: "SystemConfig::set_mailbox_capacity",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.set_mailbox_capacity(us(n));
            },
        },
    },
    Key {
        key: "mailbox.bytes",
        field: "mailbox_bytes",
        setter: "SystemConfig::set_mailbox_bytes",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.set_mailbox_bytes(us(n));
            },
        },
    },
    // [remote]
    Key {
        key: "remote.advertised_address",
        field: "advertised",
        setter: "SystemConfig::set_advertised_address",
        kind: Kind::Text {
            set: |s, addr| {
                s.config.advertised = (!addr.is_empty()).then_some(addr);
                Ok(())
            },
        },
    },
    Key {
        key: "remote.resolve_timeout",
        field: "resolve_timeout",
        setter: "SystemConfig::set_resolve_timeout",
        kind: Kind::Duration {
            min: NONZERO,
            set: |s, d| {
                s.config.set_resolve_timeout(d);
            },
        },
    },
    Key {
        key: "remote.pending_capacity",
        field: "pending_capacity",
        setter: "SystemConfig::set_pending_capacity",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 0,
            max: USIZE,
            set: |s, n| {
                s.config.set_pending_capacity(us(n));
            },
        },
    },
    Key {
        key: "remote.max_message_size",
        field: "max_message_size",
        setter: "SystemConfig::set_max_message_size",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 1,
            max: crate::config::MAX_MESSAGE_SIZE_LIMIT as u64,
            set: |s, n| {
                s.config.set_max_message_size(us(n));
            },
        },
    },
    Key {
        key: "remote.system_message_buffer",
        field: "system_buffer",
        setter: "SystemConfig::set_system_message_buffer",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.set_system_message_buffer(us(n));
            },
        },
    },
    Key {
        key: "remote.max_malformed_per_second",
        field: "max_malformed_per_second",
        setter: "SystemConfig::set_max_malformed_per_second",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 0,
            max: USIZE,
            set: |s, n| {
                s.config.set_max_malformed_per_second(us(n));
            },
        },
    },
    Key {
        key: "remote.max_associations",
        field: "max_associations",
        setter: "SystemConfig::set_max_associations",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.set_max_associations(us(n));
            },
        },
    },
    Key {
        key: "remote.association_idle_timeout",
        field: "association_idle_timeout",
        setter: "SystemConfig::set_association_idle_timeout",
        kind: Kind::Duration {
            min: NONZERO,
            set: |s, d| {
                s.config.set_association_idle_timeout(d);
            },
        },
    },
    Key {
        key: "remote.refused_connect_grace",
        field: "refused_connect_grace",
        setter: "SystemConfig::set_refused_connect_grace",
        kind: Kind::Duration {
            min: Duration::ZERO,
            set: |s, d| {
                s.config.set_refused_connect_grace(d);
            },
        },
    },
    Key {
        key: "remote.max_concurrent_dials",
        field: "max_concurrent_dials",
        setter: "SystemConfig::set_max_concurrent_dials",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.set_max_concurrent_dials(us(n));
            },
        },
    },
    Key {
        key: "remote.max_recipient_ids",
        field: "max_recipient_ids",
        setter: "SystemConfig::set_max_recipient_ids",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: U32 - 1,
            set: |s, n| {
                s.config.set_max_recipient_ids(us(n));
            },
        },
    },
    Key {
        key: "remote.recipient_window",
        field: "recipient_window",
        setter: "SystemConfig::set_recipient_window",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.set_recipient_window(us(n));
            },
        },
    },
    Key {
        key: "remote.max_parked_bytes",
        field: "max_parked_bytes",
        setter: "SystemConfig::set_max_parked_bytes",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 0,
            max: USIZE,
            set: |s, n| {
                s.config.set_max_parked_bytes(us(n));
            },
        },
    },
    Key {
        key: "remote.routes",
        field: "routes",
        setter: "SystemConfig::set_route",
        kind: Kind::Map {
            set: |s, routes| {
                for (node, addr) in routes {
                    let addr: SocketAddr = addr.parse().map_err(|_| {
                        format!("{node}: expected a socket address like \"10.0.0.5:2552\", found {addr:?}")
                    })?;
                    s.config.set_route(&node, addr);
                }
                Ok(())
            },
        },
    },
    Key {
        key: "remote.dial_allow_list",
        field: "dial_allow_list",
        setter: "SystemConfig::set_dial_allow_list",
        kind: Kind::List {
            none: Some("any"),
            set: |s, list| {
                let networks = match list {
                    None => None,
                    Some(list) => Some(
                        list.iter()
                            .map(|n| {
                                n.parse::<IpNet>().map_err(|_| {
                                    format!("expected networks like \"10.0.0.0/8\", found {n:?}")
                                })
                            })
                            .collect::<Result<Vec<_>, _>>()?,
                    ),
                };
                s.config.set_dial_allow_list(networks);
                Ok(())
            },
        },
    },
    Key {
        key: "remote.untrusted_mode",
        field: "untrusted_mode",
        setter: "SystemConfig::set_untrusted_mode",
        kind: Kind::Bool {
            set: |s, on| {
                s.config.set_untrusted_mode(on);
            },
        },
    },
    Key {
        key: "remote.trace_propagation",
        field: "trace_propagation",
        setter: "SystemConfig::set_trace_propagation",
        kind: Kind::Bool {
            set: |s, on| {
                s.config.set_trace_propagation(on);
            },
        },
    },
    Key {
        key: "remote.message_runs",
        field: "message_runs",
        setter: "SystemConfig::set_message_runs",
        kind: Kind::Bool {
            set: |s, on| {
                s.config.set_message_runs(on);
            },
        },
    },
    Key {
        key: "remote.lookup_paths",
        field: "lookup_paths",
        setter: "SystemConfig::set_lookup_paths",
        kind: Kind::List {
            none: None,
            set: |s, paths| {
                s.config.set_lookup_paths(paths.unwrap_or_default());
                Ok(())
            },
        },
    },
    // [heartbeat]
    Key {
        key: "heartbeat.interval",
        field: "interval",
        setter: "HeartbeatConfig::set_interval",
        kind: Kind::Duration {
            min: Duration::from_millis(1),
            set: |s, d| {
                s.config.heartbeat.set_interval(d);
            },
        },
    },
    Key {
        key: "heartbeat.threshold",
        field: "threshold",
        setter: "HeartbeatConfig::set_threshold",
        kind: Kind::Float {
            check: |v| {
                if v > 0.0 && v.is_finite() {
                    Ok(())
                } else {
                    Err("must be a positive number")
                }
            },
            set: |s, v| {
                s.config.heartbeat.set_threshold(v);
            },
        },
    },
    Key {
        key: "heartbeat.acceptable_pause",
        field: "acceptable_pause",
        setter: "HeartbeatConfig::set_acceptable_pause",
        kind: Kind::Duration {
            min: Duration::ZERO,
            set: |s, d| {
                s.config.heartbeat.set_acceptable_pause(d);
            },
        },
    },
    Key {
        key: "heartbeat.min_std_deviation",
        field: "min_std_deviation",
        setter: "HeartbeatConfig::set_min_std_deviation",
        kind: Kind::Duration {
            min: Duration::from_millis(1),
            set: |s, d| {
                s.config.heartbeat.set_min_std_deviation(d);
            },
        },
    },
    Key {
        key: "heartbeat.max_samples",
        field: "max_samples",
        setter: "HeartbeatConfig::set_max_samples",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 2,
            max: USIZE,
            set: |s, n| {
                s.config.heartbeat.set_max_samples(us(n));
            },
        },
    },
    // [reconnect_backoff]: staged, `Backoff::new` takes all three.
    Key {
        key: "reconnect_backoff.min",
        field: "min",
        setter: "SystemConfig::set_reconnect_backoff (Backoff::new)",
        kind: Kind::Duration {
            min: Duration::ZERO,
            set: |s, d| s.backoff_min = s.here(d),
        },
    },
    Key {
        key: "reconnect_backoff.max",
        field: "max",
        setter: "SystemConfig::set_reconnect_backoff (Backoff::new)",
        kind: Kind::Duration {
            min: Duration::ZERO,
            set: |s, d| s.backoff_max = s.here(d),
        },
    },
    Key {
        key: "reconnect_backoff.jitter",
        field: "jitter",
        setter: "SystemConfig::set_reconnect_backoff (Backoff::new)",
        kind: Kind::Float {
            check: |v| {
                if (0.0..=1.0).contains(&v) {
                    Ok(())
                } else {
                    Err("must be between 0 and 1")
                }
            },
            set: |s, v| s.backoff_jitter = Some(v),
        },
    },
    // [transport]
    Key {
        key: "transport.max_frame_size",
        field: "max_frame_size",
        setter: "TransportConfig::set_max_frame_size",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 1,
            max: U32,
            set: |s, n| {
                s.config.transport.set_max_frame_size(us(n));
            },
        },
    },
    Key {
        key: "transport.queue_capacity",
        field: "queue_capacity",
        setter: "TransportConfig::set_queue_capacity",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.transport.set_queue_capacity(us(n));
            },
        },
    },
    Key {
        key: "transport.write_buffer_size",
        field: "write_buffer_size",
        setter: "TransportConfig::set_write_buffer_size",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.transport.set_write_buffer_size(us(n));
            },
        },
    },
    Key {
        key: "transport.read_buffer_size",
        field: "read_buffer_size",
        setter: "TransportConfig::set_read_buffer_size",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.transport.set_read_buffer_size(us(n));
            },
        },
    },
    Key {
        key: "transport.producer_yield_bytes",
        field: "producer_yield_bytes",
        setter: "TransportConfig::set_producer_yield_bytes",
        kind: Kind::OptInt {
            unit: Unit::Bytes,
            none: "never",
            min: 0,
            max: USIZE,
            set: |s, n| {
                s.config.transport.set_producer_yield_bytes(n.map(us));
            },
        },
    },
    Key {
        key: "transport.send_buffer_size",
        field: "send_buffer_size",
        setter: "TransportConfig::set_send_buffer_size",
        kind: Kind::OptInt {
            unit: Unit::Bytes,
            none: "auto",
            min: 1,
            max: U32,
            set: |s, n| {
                s.config.transport.set_send_buffer_size(n.map(u32_of));
            },
        },
    },
    Key {
        key: "transport.recv_buffer_size",
        field: "recv_buffer_size",
        setter: "TransportConfig::set_recv_buffer_size",
        kind: Kind::OptInt {
            unit: Unit::Bytes,
            none: "auto",
            min: 1,
            max: U32,
            set: |s, n| {
                s.config.transport.set_recv_buffer_size(n.map(u32_of));
            },
        },
    },
    Key {
        key: "transport.nodelay",
        field: "nodelay",
        setter: "TransportConfig::set_nodelay",
        kind: Kind::Bool {
            set: |s, on| {
                s.config.transport.set_nodelay(on);
            },
        },
    },
    Key {
        key: "transport.handshake_timeout",
        field: "handshake_timeout",
        setter: "TransportConfig::set_handshake_timeout",
        kind: Kind::Duration {
            min: NONZERO,
            set: |s, d| {
                s.config.transport.set_handshake_timeout(d);
            },
        },
    },
    Key {
        key: "transport.connect_timeout",
        field: "connect_timeout",
        setter: "TransportConfig::set_connect_timeout",
        kind: Kind::Duration {
            min: NONZERO,
            set: |s, d| {
                s.config.transport.set_connect_timeout(d);
            },
        },
    },
    Key {
        key: "transport.close_timeout",
        field: "close_timeout",
        setter: "TransportConfig::set_close_timeout",
        kind: Kind::Duration {
            min: Duration::ZERO,
            set: |s, d| {
                s.config.transport.set_close_timeout(d);
            },
        },
    },
    Key {
        key: "transport.accept_backlog",
        field: "accept_backlog",
        setter: "TransportConfig::set_accept_backlog",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: U32,
            set: |s, n| {
                s.config.transport.set_accept_backlog(u32_of(n));
            },
        },
    },
    Key {
        key: "transport.max_inbound_connections",
        field: "max_inbound_connections",
        setter: "TransportConfig::set_max_inbound_connections",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.transport.set_max_inbound_connections(us(n));
            },
        },
    },
    Key {
        key: "transport.max_inbound_connections_per_ip",
        field: "max_inbound_connections_per_ip",
        setter: "TransportConfig::set_max_inbound_connections_per_ip",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.transport.set_max_inbound_connections_per_ip(us(n));
            },
        },
    },
    Key {
        key: "transport.max_unproven_per_ip",
        field: "max_unproven_per_ip",
        setter: "TransportConfig::set_max_unproven_per_ip",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.transport.set_max_unproven_per_ip(us(n));
            },
        },
    },
    Key {
        key: "transport.idle_eviction_after",
        field: "idle_eviction_after",
        setter: "TransportConfig::set_idle_eviction_after",
        kind: Kind::OptDuration {
            none: "never",
            set: |s, d| {
                s.config.transport.set_idle_eviction_after(d);
            },
        },
    },
    Key {
        key: "transport.control_stall_timeout",
        field: "control_stall_timeout",
        setter: "TransportConfig::set_control_stall_timeout",
        kind: Kind::Duration {
            min: NONZERO,
            set: |s, d| {
                s.config.transport.set_control_stall_timeout(d);
            },
        },
    },
    Key {
        key: "transport.cookie_file",
        field: "cookie_file",
        setter: "TransportConfig::set_cookie_file",
        kind: Kind::Text {
            set: |s, path| {
                // Empty: the default, `$HOME/.actors.cookie`.
                if !path.is_empty() {
                    s.config.transport.set_cookie_file(path);
                }
                Ok(())
            },
        },
    },
    Key {
        key: "transport.insecure_no_authentication",
        field: "insecure_no_authentication",
        setter: "TransportConfig::set_insecure_no_authentication",
        kind: Kind::Bool {
            set: |s, on| {
                s.config.transport.set_insecure_no_authentication(on);
            },
        },
    },
    // [tls]: staged, the three files go together.
    Key {
        key: "tls.cert_chain",
        field: "cert_chain",
        setter: "SystemConfig::set_tls (TlsConfig::from_pem_files)",
        kind: Kind::Text {
            set: |s, path| {
                s.tls_cert_chain = s.here(path);
                Ok(())
            },
        },
    },
    Key {
        key: "tls.private_key",
        field: "key",
        setter: "SystemConfig::set_tls (TlsConfig::from_pem_files)",
        kind: Kind::Text {
            set: |s, path| {
                s.tls_private_key = s.here(path);
                Ok(())
            },
        },
    },
    Key {
        key: "tls.ca_certificates",
        field: "trust",
        setter: "SystemConfig::set_tls (TlsConfig::from_pem_files)",
        kind: Kind::Text {
            set: |s, path| {
                s.tls_ca_certificates = s.here(path);
                Ok(())
            },
        },
    },
    Key {
        key: "tls.client_auth",
        field: "client_auth",
        setter: "TlsConfig::set_client_auth",
        kind: Kind::Bool {
            set: |s, on| s.tls_client_auth = s.here(on),
        },
    },
    Key {
        key: "tls.allow_host_only_certificates",
        field: "allow_host_only",
        setter: "TlsConfig::set_allow_host_only_certificates",
        kind: Kind::Bool {
            set: |s, on| s.tls_allow_host_only = s.here(on),
        },
    },
    // [cluster]: `ClusterSettings`, which `ClusterConfig` is built from.
    Key {
        key: "cluster.seeds",
        field: "seeds",
        setter: "ClusterConfig::seeds",
        kind: Kind::List {
            none: None,
            set: |s, seeds| {
                let seeds = seeds.unwrap_or_default();
                seeds.iter().try_for_each(|s| seed(s))?;
                s.config.cluster.seeds = seeds;
                Ok(())
            },
        },
    },
    Key {
        key: "cluster.udp_bind",
        field: "udp_bind",
        setter: "ClusterConfig::udp_bind",
        kind: Kind::Text {
            set: |s, addr| {
                s.config.cluster.udp_bind = socket_addr_or_none(&addr)?;
                Ok(())
            },
        },
    },
    Key {
        key: "cluster.udp_advertise",
        field: "udp_advertise",
        setter: "ClusterConfig::udp_advertise",
        kind: Kind::Text {
            set: |s, addr| {
                s.config.cluster.udp_advertise = socket_addr_or_none(&addr)?;
                Ok(())
            },
        },
    },
    Key {
        key: "cluster.probe_period",
        field: "probe_period",
        setter: "ClusterConfig::probe_period",
        kind: Kind::Duration {
            min: MIN_CLUSTER_PERIOD,
            set: |s, d| {
                s.config.cluster.probe_period = d;
                s.cluster.probe_period = Some(s.origin.clone());
            },
        },
    },
    Key {
        key: "cluster.probe_rtt",
        field: "probe_rtt",
        setter: "ClusterConfig::probe_rtt",
        kind: Kind::Duration {
            min: MIN_CLUSTER_PERIOD,
            set: |s, d| {
                s.config.cluster.probe_rtt = d;
                s.cluster.probe_rtt = Some(s.origin.clone());
            },
        },
    },
    Key {
        key: "cluster.stable_after",
        field: "stable_after",
        setter: "ClusterConfig::stable_after",
        kind: Kind::Duration {
            min: Duration::ZERO,
            set: |s, d| s.config.cluster.stable_after = d,
        },
    },
    Key {
        key: "cluster.downing",
        field: "downing",
        setter: "ClusterConfig::downing",
        kind: Kind::Text {
            set: |s, name| {
                let name = name.trim();
                s.config.cluster.downing = match Downing::ALL.into_iter().find(|d| d.name() == name)
                {
                    Some(downing) => downing,
                    None if name == "lease-majority" => {
                        return Err("lease-majority needs a lease, which is code: \
                                    ClusterConfig::downing(DowningStrategy::LeaseMajority { .. })"
                            .into());
                    }
                    None => {
                        return Err(format!(
                            "expected \"keep-majority\", \"static-quorum\", \"keep-oldest\" \
                             or \"down-all\", found {name:?}"
                        ));
                    }
                };
                s.cluster.downing = Some(s.origin.clone());
                Ok(())
            },
        },
    },
    Key {
        key: "cluster.quorum_size",
        field: "quorum_size",
        setter: "DowningStrategy::StaticQuorum",
        kind: Kind::OptInt {
            unit: Unit::Count,
            none: "none",
            min: 1,
            max: USIZE,
            set: |s, n| {
                s.config.cluster.quorum_size = n.map(us);
                s.cluster.quorum_size = Some(s.origin.clone());
            },
        },
    },
    Key {
        key: "cluster.down_if_alone",
        field: "down_if_alone",
        setter: "DowningStrategy::KeepOldest",
        kind: Kind::Bool {
            set: |s, on| {
                s.config.cluster.down_if_alone = on;
                s.cluster.down_if_alone = Some(s.origin.clone());
            },
        },
    },
    Key {
        key: "cluster.down_all_when_unstable",
        field: "down_all_when_unstable",
        setter: "ClusterConfig::down_all_when_unstable",
        kind: Kind::Text {
            set: |s, text| {
                s.config.cluster.down_all_when_unstable = match text.trim() {
                    "auto" => None,
                    "off" => Some(None),
                    t => Some(Some(
                        duration_text(t, Duration::ZERO)
                            .map_err(|e| format!("{e}, or \"auto\" or \"off\""))?,
                    )),
                };
                Ok(())
            },
        },
    },
    Key {
        key: "cluster.shutdown_when_downed",
        field: "shutdown_when_downed",
        setter: "ClusterConfig::shutdown_when_downed",
        kind: Kind::Bool {
            set: |s, on| s.config.cluster.shutdown_when_downed = on,
        },
    },
    Key {
        key: "cluster.remove_down_after",
        field: "remove_down_after",
        setter: "ClusterConfig::remove_down_after",
        kind: Kind::Duration {
            min: Duration::ZERO,
            set: |s, d| s.config.cluster.remove_down_after = d,
        },
    },
    Key {
        key: "cluster.announce_interval",
        field: "announce_interval",
        setter: "ClusterConfig::announce_interval",
        kind: Kind::Duration {
            min: MIN_CLUSTER_PERIOD,
            set: |s, d| s.config.cluster.announce_interval = d,
        },
    },
    Key {
        key: "cluster.max_packet_size",
        field: "max_packet_size",
        setter: "ClusterConfig::max_packet_size",
        kind: Kind::Int {
            unit: Unit::Bytes,
            min: MIN_CLUSTER_PACKET_SIZE as u64,
            max: MAX_CLUSTER_PACKET_SIZE as u64,
            set: |s, n| s.config.cluster.max_packet_size = us(n),
        },
    },
    Key {
        key: "cluster.max_members",
        field: "max_members",
        setter: "ClusterConfig::max_members",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: USIZE,
            set: |s, n| s.config.cluster.max_members = us(n),
        },
    },
    Key {
        key: "cluster.event_capacity",
        field: "event_capacity",
        setter: "ClusterConfig::event_capacity",
        kind: Kind::Int {
            unit: Unit::Count,
            min: 1,
            max: MAX_CLUSTER_EVENT_CAPACITY as u64,
            set: |s, n| s.config.cluster.event_capacity = us(n),
        },
    },
];

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use transport::HeartbeatConfig;

    use super::*;
    use crate::cluster::{ClusterConfig, DowningStrategy};

    /// Every field, nested ones included, one per line.
    fn snapshot(config: &SystemConfig) -> String {
        format!("{config:#?}")
    }

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn err_toml(text: &str) -> ConfigError {
        SystemConfig::from_toml_str(text).expect_err(text)
    }

    fn err_env(list: &[(&str, &str)]) -> ConfigError {
        SystemConfig::default()
            .apply_env(vars(list))
            .expect_err("should be refused")
    }

    /// The keys of `reference.toml` with the comment lines above each.
    fn reference_comments() -> BTreeMap<String, String> {
        let (mut out, mut section, mut comment) = (BTreeMap::new(), "", String::new());
        for line in REFERENCE_CONFIG.lines().map(str::trim) {
            if let Some(text) = line.strip_prefix('#') {
                comment.push_str(text);
                comment.push('\n');
            } else if let Some(name) = line.strip_prefix('[') {
                section = name.trim_end_matches(']');
                comment.clear();
            } else if let Some((name, _)) = line.split_once('=') {
                out.insert(
                    format!("{section}.{}", name.trim()),
                    std::mem::take(&mut comment),
                );
            }
        }
        out
    }

    // 1. The reference file's values are the defaults.
    #[test]
    fn reference_file_is_the_defaults() {
        let loaded = SystemConfig::from_toml_str(REFERENCE_CONFIG).unwrap();
        assert_eq!(snapshot(&loaded), snapshot(&SystemConfig::default()));
    }

    // 2. Completeness: every key the loader knows is in the reference file,
    //    with a comment naming its setter and its default.
    #[test]
    fn reference_file_documents_every_key() {
        let table: toml::Table = REFERENCE_CONFIG.parse().unwrap();
        for key in KEYS {
            let (section, name) = key.split();
            assert!(
                table
                    .get(section)
                    .and_then(|s| s.as_table())
                    .is_some_and(|s| s.contains_key(name)),
                "{} is missing from actors/reference.toml",
                key.key
            );
        }
        let comments = reference_comments();
        let known: BTreeSet<_> = KEYS.iter().map(|k| k.key.to_owned()).collect();
        let documented: BTreeSet<_> = comments.keys().cloned().collect();
        assert_eq!(documented, known, "reference.toml and KEYS disagree");
        for key in KEYS {
            let comment = &comments[key.key];
            assert!(
                comment.contains(key.setter),
                "the comment of {} in reference.toml should name {}",
                key.key,
                key.setter
            );
            assert!(
                comment.contains("default"),
                "the comment of {} in reference.toml should give its default",
                key.key
            );
        }
    }

    // 2b. Every field of the configuration has a key, so a new setting
    //     cannot be added without one (or a reason here why not).
    #[test]
    fn every_field_has_a_key() {
        /// Fields without a key, and why.
        const UNKEYED: &[&str] = &[
            // Sections, not settings.
            "transport",
            "heartbeat",
            "backoff",
            "tls",
            "cluster",
            // Backoff's attempt counter is state, not a setting.
            "attempt",
            // Secrets stay out of configuration files (ACTORS_COOKIE,
            // cookie_file, or code).
            "shared_secret",
            // Certificate pins are code (TlsConfig::set_peer_identity).
            "identity",
            // The actors set these on the transport themselves (what they
            // announce, how they count messages in a frame); remote
            // .message_runs is the setting.
            "app_flags",
            "message_count",
        ];
        #[allow(unused_mut, reason = "mutated only with the tls feature")]
        let mut config = SystemConfig::default();
        #[cfg(feature = "tls")]
        config.set_tls(transport::TlsConfig::from_pem_files("c", "k", "ca"));
        let fields: BTreeSet<String> = snapshot(&config)
            .lines()
            .filter_map(|line| {
                let (name, _) = line.trim_start().split_once(": ")?;
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    .then(|| name.to_owned())
            })
            .collect();
        let keyed: BTreeSet<String> = KEYS.iter().map(|k| k.field.to_owned()).collect();
        for field in &keyed {
            #[cfg(not(feature = "tls"))]
            if KEYS
                .iter()
                .any(|k| k.field == field && k.section() == "tls")
            {
                continue;
            }
            assert!(fields.contains(field), "no field {field:?} in {fields:?}");
        }
        let missing: Vec<_> = fields
            .iter()
            .filter(|f| !keyed.contains(*f) && !UNKEYED.contains(&f.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "fields without a key in config_file::KEYS: {missing:?}"
        );
    }

    #[test]
    fn keys_are_unique_and_well_formed() {
        let mut seen = BTreeSet::new();
        for key in KEYS {
            let (section, name) = key.split();
            assert!(!section.is_empty() && !name.is_empty() && !name.contains('.'));
            assert!(seen.insert(key.key), "{} twice", key.key);
        }
        let env: BTreeSet<_> = KEYS.iter().map(|k| env_name(k.key)).collect();
        assert_eq!(env.len(), KEYS.len(), "two keys share a variable name");
        assert_eq!(
            env_name("remote.max_associations"),
            "ACTORS_REMOTE__MAX_ASSOCIATIONS"
        );
    }

    // 3. A file with other values changes exactly those settings.
    #[test]
    fn a_file_changes_exactly_its_keys() {
        let loaded = SystemConfig::from_toml_str(
            r#"
            [mailbox]
            capacity = 4096
            bytes = "1MiB"

            [remote]
            advertised_address = "node.example:2552"
            resolve_timeout = "250ms"
            pending_capacity = 0
            max_parked_bytes = 1048576
            routes = { "b@10.0.0.5:2552" = "192.168.1.5:2552" }
            dial_allow_list = ["10.0.0.0/8", "127.0.0.1/32"]
            untrusted_mode = true
            lookup_paths = ["/user/api", "/user/workers/"]

            [heartbeat]
            interval = "500ms"
            threshold = 8
            max_samples = 50

            [reconnect_backoff]
            max = "30s"

            [transport]
            queue_capacity = "8MiB"
            producer_yield_bytes = "never"
            send_buffer_size = "256KiB"
            nodelay = false
            idle_eviction_after = "never"
            control_stall_timeout = "1m 30s"
            cookie_file = "/etc/actors/cookie"
            "#,
        )
        .unwrap();

        let mut expected = SystemConfig::default();
        let mut heartbeat = HeartbeatConfig::default();
        heartbeat
            .set_interval(Duration::from_millis(500))
            .set_threshold(8.0)
            .set_max_samples(50);
        expected
            .set_mailbox_capacity(4096)
            .set_mailbox_bytes(1 << 20)
            .set_advertised_address("node.example:2552")
            .set_resolve_timeout(Duration::from_millis(250))
            .set_pending_capacity(0)
            .set_max_parked_bytes(1 << 20)
            .set_route("b@10.0.0.5:2552", "192.168.1.5:2552".parse().unwrap())
            .set_dial_allow_list(Some(vec![
                "10.0.0.0/8".parse().unwrap(),
                "127.0.0.1/32".parse().unwrap(),
            ]))
            .set_untrusted_mode(true)
            .set_lookup_paths(["/user/api", "/user/workers/"])
            .set_heartbeat(heartbeat)
            .set_reconnect_backoff(Backoff::new(
                transport::DEFAULT_BACKOFF_MIN,
                Duration::from_secs(30),
                transport::DEFAULT_BACKOFF_JITTER,
            ));
        expected
            .transport_mut()
            .set_queue_capacity(8 << 20)
            .set_producer_yield_bytes(None)
            .set_send_buffer_size(Some(256 << 10))
            .set_nodelay(false)
            .set_idle_eviction_after(None)
            .set_control_stall_timeout(Duration::from_secs(90))
            .set_cookie_file("/etc/actors/cookie");

        assert_ne!(snapshot(&loaded), snapshot(&SystemConfig::default()));
        assert_eq!(snapshot(&loaded), snapshot(&expected));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_files_from_a_file_and_the_environment() {
        let mut expected = SystemConfig::default();
        let mut tls = transport::TlsConfig::from_pem_files("n.pem", "n.key", "ca.pem");
        tls.set_client_auth(false);
        expected.set_tls(tls);

        let file = r#"
            [tls]
            cert_chain = "n.pem"
            private_key = "n.key"
            client_auth = false
        "#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(&path, file).unwrap();
        // The third file from the environment completes the set.
        let loaded = load_from(
            Some(&path),
            vars(&[("ACTORS_TLS__CA_CERTIFICATES", "ca.pem")]),
        )
        .unwrap();
        assert_eq!(snapshot(&loaded), snapshot(&expected));

        // Without it, the missing one is named.
        let e = err_toml(file);
        assert!(
            matches!(&e, ConfigError::InvalidValue { key, .. } if key == "tls.ca_certificates"),
            "{e}"
        );
        assert!(e.to_string().contains("missing"), "{e}");

        // A non-default flag without TLS files is refused.
        let e = err_toml("[tls]\nclient_auth = false");
        assert!(e.to_string().contains("\"tls.client_auth\""), "{e}");
    }

    // Every key reads from a variable too: each reference value, written
    // as a variable, gives the default again.
    #[test]
    fn every_key_reads_from_the_environment() {
        let table: toml::Table = REFERENCE_CONFIG.parse().unwrap();
        let default = snapshot(&SystemConfig::default());
        for key in KEYS {
            let (section, name) = key.split();
            let value = &table[section][name];
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Array(a) => a
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
                    .join(","),
                toml::Value::Table(t) => t
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                    .collect::<Vec<_>>()
                    .join(","),
                toml::Value::Datetime(_) => unreachable!("no key takes a date"),
            };
            let mut config = SystemConfig::default();
            config
                .apply_env([(env_name(key.key), text.clone())])
                .unwrap_or_else(|e| panic!("{} = {text:?}: {e}", env_name(key.key)));
            assert_eq!(snapshot(&config), default, "{}", key.key);
        }
        // And a variable does set its key.
        let mut config = SystemConfig::default();
        config
            .apply_env(vars(&[
                ("ACTORS_REMOTE__MAX_ASSOCIATIONS", "2048"),
                ("ACTORS_REMOTE__DIAL_ALLOW_LIST", "10.0.0.0/8, 127.0.0.1/32"),
                ("ACTORS_REMOTE__ROUTES", "b@h:1=10.0.0.5:2552"),
                ("ACTORS_TRANSPORT__QUEUE_CAPACITY", "8MiB"),
            ]))
            .unwrap();
        let mut expected = SystemConfig::default();
        expected
            .set_max_associations(2048)
            .set_dial_allow_list(Some(vec![
                "10.0.0.0/8".parse().unwrap(),
                "127.0.0.1/32".parse().unwrap(),
            ]))
            .set_route("b@h:1", "10.0.0.5:2552".parse().unwrap())
            .transport_mut()
            .set_queue_capacity(8 << 20);
        assert_eq!(snapshot(&config), snapshot(&expected));
    }

    // 4. Unknown keys and bad values are errors that name the key.
    #[test]
    fn unknown_keys_are_named() {
        let e = err_toml("[mailbox]\ncapasity = 1");
        assert_eq!(
            e.to_string(),
            "unknown key \"mailbox.capasity\" in the TOML text; did you mean \
             \"mailbox.capacity\"?; every key is listed in actors/reference.toml"
        );
        for (text, key) in [
            ("[mailboxes]\ncapacity = 1", "mailboxes.capacity"),
            ("[nothing]", "nothing"),
            ("capacity = 1", "capacity"),
            ("[mailbox.extra]\nx = 1", "mailbox.extra"),
        ] {
            let e = err_toml(text);
            assert!(
                matches!(&e, ConfigError::UnknownKey { key: k, .. } if k == key),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn unknown_variables_are_named() {
        let e = err_env(&[("ACTORS_MAILBOX__CAPASITY", "1")]);
        assert_eq!(
            e.to_string(),
            "unknown key \"mailbox.capasity\" in environment variable \
             ACTORS_MAILBOX__CAPASITY; did you mean ACTORS_MAILBOX__CAPACITY?; \
             every key is listed in actors/reference.toml"
        );
        let e = err_env(&[("ACTORS_LOG", "debug")]);
        assert!(e.to_string().contains("ACTORS_LOG"), "{e}");
        // Single underscore between section and key is not the rule.
        let e = err_env(&[("ACTORS_MAILBOX_CAPACITY", "1")]);
        assert!(e.to_string().contains("ACTORS_MAILBOX_CAPACITY"), "{e}");
        // The transport's secret and other programs' variables are not ours.
        let mut config = SystemConfig::default();
        config
            .apply_env(vars(&[
                ("ACTORS_COOKIE", "0123456789abcdef0123456789abcdef"),
                ("PATH", "/bin"),
                ("RUST_LOG", "debug"),
            ]))
            .unwrap();
        assert_eq!(snapshot(&config), snapshot(&SystemConfig::default()));
    }

    #[test]
    fn bad_values_name_the_key() {
        for (text, key, says) in [
            (
                "[mailbox]\ncapacity = \"lots\"",
                "mailbox.capacity",
                "expected an integer, found string \"lots\"",
            ),
            ("[mailbox]\ncapacity = 0", "mailbox.capacity", "at least 1"),
            ("[mailbox]\ncapacity = -5", "mailbox.capacity", "negative"),
            ("[mailbox]\nbytes = \"64MB\"", "mailbox.bytes", "\"64MB\""),
            (
                "[heartbeat]\ninterval = \"10 parsecs\"",
                "heartbeat.interval",
                "expected a duration",
            ),
            (
                "[heartbeat]\ninterval = 10",
                "heartbeat.interval",
                "found integer 10",
            ),
            (
                "[heartbeat]\ninterval = \"0s\"",
                "heartbeat.interval",
                "at least 1ms",
            ),
            (
                "[heartbeat]\nthreshold = 0",
                "heartbeat.threshold",
                "positive",
            ),
            (
                "[transport]\nhandshake_timeout = \"0s\"",
                "transport.handshake_timeout",
                "greater than zero",
            ),
            (
                "[transport]\nmax_frame_size = \"4GiB\"",
                "transport.max_frame_size",
                "at most 4294967295",
            ),
            (
                "[transport]\nnodelay = \"yes\"",
                "transport.nodelay",
                "true or false",
            ),
            (
                "[transport]\nidle_eviction_after = \"sometimes\"",
                "transport.idle_eviction_after",
                "or \"never\"",
            ),
            (
                "[reconnect_backoff]\njitter = 1.5",
                "reconnect_backoff.jitter",
                "between 0 and 1",
            ),
            (
                "[reconnect_backoff]\nmax = \"50ms\"",
                "reconnect_backoff.max",
                "max 50ms is below min 100ms",
            ),
            (
                "[remote]\ndial_allow_list = [\"10.0.0.0/33\"]",
                "remote.dial_allow_list",
                "\"10.0.0.0/33\"",
            ),
            (
                "[remote]\nroutes = { \"b@h:1\" = \"nowhere\" }",
                "remote.routes",
                "b@h:1",
            ),
            (
                "[remote]\nlookup_paths = \"/user/a\"",
                "remote.lookup_paths",
                "array",
            ),
        ] {
            let e = err_toml(text);
            let message = e.to_string();
            assert!(
                matches!(&e, ConfigError::InvalidValue { key: k, .. } if k == key),
                "{text}: {message}"
            );
            assert!(message.contains(&format!("\"{key}\"")), "{message}");
            assert!(message.contains(says), "{text}: {message} lacks {says}");
        }
        let e = err_env(&[("ACTORS_HEARTBEAT__INTERVAL", "soon")]);
        let message = e.to_string();
        assert!(message.contains("\"heartbeat.interval\""), "{message}");
        assert!(message.contains("ACTORS_HEARTBEAT__INTERVAL"), "{message}");

        let e = err_toml("[mailbox\ncapacity = 1");
        assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
    }

    #[test]
    fn a_refused_environment_changes_nothing() {
        let mut config = SystemConfig::default();
        let before = snapshot(&config);
        config
            .apply_env(vars(&[
                ("ACTORS_MAILBOX__CAPACITY", "7"),
                ("ACTORS_MAILBOX__BYTES", "many"),
            ]))
            .unwrap_err();
        assert_eq!(snapshot(&config), before);
    }

    // 5. The environment wins over the file.
    #[test]
    fn environment_overrides_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(
            &path,
            "[mailbox]\ncapacity = 100\n[heartbeat]\ninterval = \"2s\"\n",
        )
        .unwrap();
        let env = vars(&[
            ("ACTORS_MAILBOX__CAPACITY", "200"),
            ("ACTORS_REMOTE__MAX_ASSOCIATIONS", "7"),
        ]);
        let mut expected = SystemConfig::default();
        let mut heartbeat = HeartbeatConfig::default();
        heartbeat.set_interval(Duration::from_secs(2));
        expected
            .set_mailbox_capacity(200)
            .set_heartbeat(heartbeat)
            .set_max_associations(7);

        let loaded = load_from(Some(&path), env.clone()).unwrap();
        assert_eq!(snapshot(&loaded), snapshot(&expected));
        // The same through the public steps.
        let mut stepped = SystemConfig::from_toml_file(&path).unwrap();
        stepped.apply_env(env).unwrap();
        assert_eq!(snapshot(&stepped), snapshot(&expected));

        let e = SystemConfig::from_toml_file(dir.path().join("absent.toml")).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
        assert!(e.to_string().contains("absent.toml"), "{e}");
    }

    // [cluster]: the settings `ClusterConfig` is built from.

    /// A `ClusterConfig` as text, to compare one built from a file with one
    /// built in code (it holds a `DowningStrategy`, which has no `Eq`).
    fn cluster_of(config: &SystemConfig) -> String {
        format!("{:#?}", ClusterConfig::from(config))
    }

    #[test]
    fn the_reference_cluster_section_is_cluster_config_new() {
        let loaded = SystemConfig::from_toml_str(REFERENCE_CONFIG).unwrap();
        assert_eq!(loaded.cluster(), &ClusterSettings::default());
        assert_eq!(cluster_of(&loaded), format!("{:#?}", ClusterConfig::new()));
        // And the builder's defaults are what they have always been.
        let new = format!("{:#?}", ClusterConfig::new());
        for field in [
            "probe_period: 1.5s",
            "probe_rtt: 500ms",
            "stable_after: 10s",
            "downing: KeepMajority",
            "down_all_when_unstable: None",
            "shutdown_when_downed: true",
            "remove_down_after: 15s",
            "announce_interval: 1s",
            "max_packet_size: 1400",
            "max_members: 4096",
            "event_capacity: 1024",
        ] {
            assert!(new.contains(field), "{field} in {new}");
        }
    }

    #[test]
    fn every_cluster_key_sets_its_cluster_config_setting() {
        let loaded = SystemConfig::from_toml_str(
            r#"
            [cluster]
            seeds = ["10.0.0.1:2552", "seed.example:2552", "[::1]:2552"]
            udp_bind = "0.0.0.0:2553"
            udp_advertise = "203.0.113.5:0"
            probe_period = "2s"
            probe_rtt = "250ms"
            stable_after = "20s"
            downing = "keep-oldest"
            down_if_alone = false
            down_all_when_unstable = "off"
            shutdown_when_downed = false
            remove_down_after = "1m"
            announce_interval = "500ms"
            max_packet_size = "1KiB"
            max_members = 100
            event_capacity = 16
            "#,
        )
        .unwrap();
        let expected = ClusterConfig::new()
            .seeds(["10.0.0.1:2552", "seed.example:2552", "[::1]:2552"])
            .udp_bind("0.0.0.0:2553".parse().unwrap())
            .udp_advertise("203.0.113.5:0".parse().unwrap())
            .probe_period(Duration::from_secs(2))
            .probe_rtt(Duration::from_millis(250))
            .stable_after(Duration::from_secs(20))
            .downing(DowningStrategy::KeepOldest {
                down_if_alone: false,
            })
            .down_all_when_unstable(None)
            .shutdown_when_downed(false)
            .remove_down_after(Duration::from_secs(60))
            .announce_interval(Duration::from_millis(500))
            .max_packet_size(1024)
            .max_members(100)
            .event_capacity(16);
        assert_eq!(cluster_of(&loaded), format!("{expected:#?}"));
        // Nothing outside the section changed.
        let mut rest = loaded.clone();
        rest.cluster = ClusterSettings::default();
        assert_eq!(snapshot(&rest), snapshot(&SystemConfig::default()));

        let d = SystemConfig::from_toml_str("[cluster]\ndown_all_when_unstable = \"6s\"").unwrap();
        let expected = ClusterConfig::new().down_all_when_unstable(Some(Duration::from_secs(6)));
        assert_eq!(cluster_of(&d), format!("{expected:#?}"));
    }

    #[test]
    fn each_downing_strategy_with_its_parameters() {
        for (text, strategy) in [
            ("downing = \"keep-majority\"", DowningStrategy::KeepMajority),
            (
                "downing = \"static-quorum\"\nquorum_size = 3",
                DowningStrategy::StaticQuorum { quorum_size: 3 },
            ),
            (
                "downing = \"keep-oldest\"",
                DowningStrategy::KeepOldest {
                    down_if_alone: true,
                },
            ),
            (
                "downing = \"keep-oldest\"\ndown_if_alone = false",
                DowningStrategy::KeepOldest {
                    down_if_alone: false,
                },
            ),
            ("downing = \"down-all\"", DowningStrategy::DownAll),
            // The parameters' defaults may be written with any strategy.
            (
                "downing = \"down-all\"\nquorum_size = \"none\"\ndown_if_alone = true",
                DowningStrategy::DownAll,
            ),
        ] {
            let loaded = SystemConfig::from_toml_str(&format!("[cluster]\n{text}"))
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            let expected = ClusterConfig::new().downing(strategy.clone());
            assert_eq!(cluster_of(&loaded), format!("{expected:#?}"), "{text}");
            assert_eq!(loaded.cluster().downing.name(), strategy.name());
        }
        // Every name a file takes is the strategy's own.
        let names: Vec<_> = Downing::ALL.iter().map(|d| d.name()).collect();
        assert_eq!(
            names,
            ["keep-majority", "static-quorum", "keep-oldest", "down-all"]
        );
    }

    #[test]
    fn bad_cluster_values_name_the_key_and_the_range() {
        for (text, key, says) in [
            (
                "probe_period = \"0s\"",
                "cluster.probe_period",
                "at least 1ms",
            ),
            ("probe_rtt = \"0s\"", "cluster.probe_rtt", "at least 1ms"),
            (
                "announce_interval = \"0ms\"",
                "cluster.announce_interval",
                "at least 1ms",
            ),
            (
                "probe_rtt = \"1s\"",
                "cluster.probe_rtt",
                "probe_rtt 1s must be at most half of probe_period 1s 500ms",
            ),
            (
                "probe_period = \"600ms\"",
                "cluster.probe_period",
                "probe_rtt 500ms must be at most half of probe_period 600ms",
            ),
            (
                "max_packet_size = 100",
                "cluster.max_packet_size",
                "must be at least 512, found 100",
            ),
            (
                "max_packet_size = \"64KiB\"",
                "cluster.max_packet_size",
                "must be at most 65507, found 65536",
            ),
            ("max_members = 0", "cluster.max_members", "at least 1"),
            ("event_capacity = 0", "cluster.event_capacity", "at least 1"),
            ("stable_after = 10", "cluster.stable_after", "integer 10"),
            (
                "seeds = [\"10.0.0.1\"]",
                "cluster.seeds",
                "host:port), found \"10.0.0.1\"",
            ),
            ("seeds = \"10.0.0.1:2552\"", "cluster.seeds", "array"),
            ("udp_bind = \"nowhere\"", "cluster.udp_bind", "\"nowhere\""),
            (
                "udp_advertise = \"10.0.0.1\"",
                "cluster.udp_advertise",
                "socket address",
            ),
            (
                "downing = \"keep-majorty\"",
                "cluster.downing",
                "\"keep-majority\", \"static-quorum\", \"keep-oldest\" or \"down-all\", \
                 found \"keep-majorty\"",
            ),
            (
                "downing = \"lease-majority\"",
                "cluster.downing",
                "needs a lease",
            ),
            (
                "downing = \"static-quorum\"",
                "cluster.quorum_size",
                "missing: downing \"static-quorum\" needs quorum_size",
            ),
            (
                "downing = \"static-quorum\"\nquorum_size = 0",
                "cluster.quorum_size",
                "at least 1",
            ),
            (
                "quorum_size = 3",
                "cluster.quorum_size",
                "quorum_size is for downing \"static-quorum\" only; downing is \"keep-majority\"",
            ),
            (
                "downing = \"down-all\"\ndown_if_alone = false",
                "cluster.down_if_alone",
                "for downing \"keep-oldest\" only; downing is \"down-all\" (in the TOML text)",
            ),
            (
                "down_all_when_unstable = \"sometimes\"",
                "cluster.down_all_when_unstable",
                "or \"auto\" or \"off\"",
            ),
            (
                "shutdown_when_downed = \"yes\"",
                "cluster.shutdown_when_downed",
                "true or false",
            ),
        ] {
            let text = format!("[cluster]\n{text}");
            let e = err_toml(&text);
            let message = e.to_string();
            assert!(
                matches!(&e, ConfigError::InvalidValue { key: k, .. } if k == key),
                "{text}: {message}"
            );
            assert!(message.contains(&format!("\"{key}\"")), "{message}");
            assert!(message.contains(says), "{text}: {message} lacks {says}");
        }
        let e = err_toml("[cluster]\nprobe_perod = \"1s\"");
        assert!(
            e.to_string()
                .contains("did you mean \"cluster.probe_period\"?"),
            "{e}"
        );
        let e = err_env(&[("ACTORS_CLUSTER__SEED", "10.0.0.1:2552")]);
        assert!(
            e.to_string()
                .contains("did you mean ACTORS_CLUSTER__SEEDS?"),
            "{e}"
        );
        // Past what TOML's integers hold.
        let e = err_env(&[("ACTORS_CLUSTER__EVENT_CAPACITY", "9223372036854775808")]);
        assert!(
            e.to_string()
                .contains("must be at most 9223372036854775807"),
            "{e}"
        );
        let e = err_env(&[("ACTORS_CLUSTER__MAX_PACKET_SIZE", "100")]);
        assert!(
            e.to_string().contains("ACTORS_CLUSTER__MAX_PACKET_SIZE")
                && e.to_string().contains("at least 512"),
            "{e}"
        );
    }

    #[test]
    fn the_environment_overrides_the_cluster_section() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(
            &path,
            "[cluster]\nseeds = [\"10.0.0.1:2552\"]\nprobe_period = \"2s\"\n\
             downing = \"static-quorum\"\nquorum_size = 3\n",
        )
        .unwrap();
        let loaded = load_from(
            Some(&path),
            vars(&[
                ("ACTORS_CLUSTER__SEEDS", "10.0.0.7:2552, 10.0.0.8:2552"),
                ("ACTORS_CLUSTER__QUORUM_SIZE", "2"),
                ("ACTORS_CLUSTER__DOWN_ALL_WHEN_UNSTABLE", "off"),
            ]),
        )
        .unwrap();
        let expected = ClusterConfig::new()
            .seeds(["10.0.0.7:2552", "10.0.0.8:2552"])
            .probe_period(Duration::from_secs(2))
            .downing(DowningStrategy::StaticQuorum { quorum_size: 2 })
            .down_all_when_unstable(None);
        assert_eq!(cluster_of(&loaded), format!("{expected:#?}"));

        // A strategy changed in the environment with the file's quorum
        // left behind: the error names both places.
        let e = load_from(
            Some(&path),
            vars(&[("ACTORS_CLUSTER__DOWNING", "keep-majority")]),
        )
        .unwrap_err();
        let message = e.to_string();
        assert!(
            matches!(&e, ConfigError::InvalidValue { key, origin: ConfigOrigin::File(_), .. }
                if key == "cluster.quorum_size"),
            "{message}"
        );
        assert!(
            message.contains("(in environment variable ACTORS_CLUSTER__DOWNING)"),
            "{message}"
        );
        // Moving the strategy with its parameter is fine.
        load_from(
            Some(&path),
            vars(&[
                ("ACTORS_CLUSTER__DOWNING", "keep-majority"),
                ("ACTORS_CLUSTER__QUORUM_SIZE", "none"),
            ]),
        )
        .unwrap();
        // The environment on top of a loaded configuration: checked with
        // what the file set.
        let mut stepped = SystemConfig::from_toml_file(&path).unwrap();
        stepped
            .apply_env(vars(&[("ACTORS_CLUSTER__QUORUM_SIZE", "none")]))
            .unwrap_err();
        stepped
            .apply_env(vars(&[("ACTORS_CLUSTER__PROBE_RTT", "1s")]))
            .unwrap();
        stepped
            .apply_env(vars(&[("ACTORS_CLUSTER__PROBE_RTT", "1001ms")]))
            .unwrap_err();
    }

    #[test]
    fn sizes_and_suggestions() {
        assert_eq!(size("65536"), Ok(65536));
        assert_eq!(size("64KiB"), Ok(64 << 10));
        assert_eq!(size("4 MiB"), Ok(4 << 20));
        assert_eq!(size("1_024"), Ok(1024));
        assert!(size("1.5MiB").is_err());
        assert!(size("99999999999GiB").is_err());
        assert_eq!(
            nearest_key("remote.max_asociations"),
            Some("remote.max_associations")
        );
        assert_eq!(nearest_key("something.else.entirely"), None);
    }
}
