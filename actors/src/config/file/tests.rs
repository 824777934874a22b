use std::collections::{BTreeMap, BTreeSet};

use transport::{Backoff, HeartbeatConfig};

use super::{values::size, *};
use crate::{
    cluster::{ClusterConfig, DowningStrategy},
    config::{ClusterSettings, Downing},
};

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
    ActorsEnv::from_vars(vars(list), true)
        .and_then(|env| SystemConfig::from_figment(&Figment::from(env)))
        .expect_err("should be refused")
}

/// The defaults, then the file at `file`, then `vars` (not strict).
fn load_from(
    file: Option<&Path>,
    vars: Vec<(String, String)>,
) -> Result<SystemConfig, ConfigError> {
    let mut figment = Figment::new();
    if let Some(path) = file {
        figment = figment.merge(toml_file(path)?);
    }
    SystemConfig::from_figment(&figment.merge(ActorsEnv::from_vars(vars, false)?))
}

fn env_config(list: &[(&str, &str)]) -> Result<SystemConfig, ConfigError> {
    load_from(None, vars(list))
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

// 2. Completeness: the reference file names exactly the keys of the
//    section structs, each with a comment giving its default and the
//    setter it maps to, and its values are the structs' defaults.
#[test]
fn reference_file_documents_every_key() {
    let comments = reference_comments();
    let documented: BTreeSet<_> = comments.keys().cloned().collect();
    let known: BTreeSet<_> = known_keys().keys().cloned().collect();
    assert_eq!(
        documented, known,
        "reference.toml and the section structs disagree"
    );
    for (key, comment) in &comments {
        assert!(
            comment.contains("default"),
            "the comment of {key} in reference.toml should give its default"
        );
        assert!(
            comment.contains("::"),
            "the comment of {key} in reference.toml should name its setter"
        );
    }
    let reference: Settings = Figment::from(Toml::string(REFERENCE_CONFIG))
        .extract()
        .unwrap();
    assert_eq!(
        reference,
        Settings::default(),
        "a default in reference.toml differs"
    );
    // The sections' defaults are SystemConfig's (the heartbeat's are
    // written out in its section).
    assert_eq!(
        snapshot(&Settings::default().into_config()),
        snapshot(&SystemConfig::default())
    );
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
        // The node's own peer memory budget, which the actors hand the
        // transport; remote.peer_memory_budget is the setting.
        "admission",
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
    /// Fields whose key is spelled differently.
    const RENAMED: &[(&str, &str)] = &[
        ("advertised", "advertised_address"),
        ("system_buffer", "system_message_buffer"),
        ("key", "private_key"),
        ("trust", "ca_certificates"),
        ("allow_host_only", "allow_host_only_certificates"),
        ("mailbox_capacity", "capacity"),
        ("mailbox_bytes", "bytes"),
    ];
    let keyed: BTreeSet<String> = known_keys()
        .keys()
        .map(|k| k.split_once('.').unwrap().1.to_owned())
        .collect();
    let missing: Vec<_> = fields
        .iter()
        .map(|f| {
            RENAMED
                .iter()
                .find(|(from, _)| from == f)
                .map_or(f.as_str(), |(_, to)| to)
        })
        .filter(|f| !keyed.contains(*f) && !UNKEYED.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "fields without a key in the section structs: {missing:?}"
    );
}

#[test]
fn keys_are_well_formed() {
    let keys = known_keys();
    assert!(keys.len() > 50, "{keys:?}");
    for key in keys.keys() {
        let (section, name) = key.split_once('.').unwrap();
        assert!(!section.is_empty() && !name.is_empty() && !name.contains('.'));
    }
    let env: BTreeSet<_> = keys.keys().map(|k| env_name(k)).collect();
    assert_eq!(env.len(), keys.len(), "two keys share a variable name");
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
        .unwrap()
        .set_threshold(8.0)
        .unwrap()
        .set_max_samples(50)
        .unwrap();
    expected
        .set_mailbox_capacity(4096)
        .unwrap()
        .set_mailbox_bytes(1 << 20)
        .unwrap()
        .set_resolve_timeout(Duration::from_millis(250))
        .unwrap()
        .set_advertised_address("node.example:2552")
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
        .set_reconnect_backoff(
            Backoff::new(
                transport::DEFAULT_BACKOFF_MIN,
                Duration::from_secs(30),
                transport::DEFAULT_BACKOFF_JITTER,
            )
            .unwrap(),
        );
    expected
        .transport_mut()
        .set_queue_capacity(8 << 20)
        .unwrap()
        .set_producer_yield_bytes(None)
        .set_send_buffer_size(Some(256 << 10))
        .unwrap()
        .set_nodelay(false)
        .set_idle_eviction_after(None)
        .set_control_stall_timeout(Duration::from_secs(90))
        .unwrap()
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
    for key in known_keys().keys() {
        let (section, name) = key.split_once('.').unwrap();
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
        let name = env_name(key);
        let config =
            env_config(&[(&name, &text)]).unwrap_or_else(|e| panic!("{name} = {text:?}: {e}"));
        assert_eq!(snapshot(&config), default, "{key}");
    }
    // And a variable does set its key.
    let config = env_config(&[
        ("ACTORS_REMOTE__MAX_ASSOCIATIONS", "2048"),
        ("ACTORS_REMOTE__DIAL_ALLOW_LIST", "10.0.0.0/8, 127.0.0.1/32"),
        ("ACTORS_REMOTE__ROUTES", "b@h:1=10.0.0.5:2552"),
        ("ACTORS_TRANSPORT__QUEUE_CAPACITY", "8MiB"),
    ])
    .unwrap();
    let mut expected = SystemConfig::default();
    expected
        .set_max_associations(2048)
        .unwrap()
        .set_dial_allow_list(Some(vec![
            "10.0.0.0/8".parse().unwrap(),
            "127.0.0.1/32".parse().unwrap(),
        ]))
        .set_route("b@h:1", "10.0.0.5:2552".parse().unwrap())
        .transport_mut()
        .set_queue_capacity(8 << 20)
        .unwrap();
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
fn unknown_variables_are_named_in_strict_mode() {
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
    // The transport's secret, the strict switch and other programs'
    // variables are not ours.
    let config = SystemConfig::from_figment(&Figment::from(
        ActorsEnv::from_vars(
            vars(&[
                ("ACTORS_COOKIE", "0123456789abcdef0123456789abcdef"),
                ("ACTORS_STRICT", "1"),
                ("PATH", "/bin"),
                ("RUST_LOG", "debug"),
            ]),
            true,
        )
        .unwrap(),
    ))
    .unwrap();
    assert_eq!(snapshot(&config), snapshot(&SystemConfig::default()));
}

/// Without strict mode an unknown `ACTORS_*` variable (an unrelated
/// `ACTORS_REPO` in a deployment) is a warning naming it, and the known
/// ones still apply.
#[test]
fn unknown_variables_warn_without_strict_mode() {
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let config = tracing::subscriber::with_default(subscriber, || {
        env_config(&[
            ("ACTORS_MAILBOX__CAPASITY", "1"),
            ("ACTORS_MAILBOX__BYTES", "1KiB"),
        ])
    })
    .unwrap();
    let mut expected = SystemConfig::default();
    expected.set_mailbox_bytes(1024).unwrap();
    assert_eq!(snapshot(&config), snapshot(&expected));
    let logged = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("WARN"), "{logged}");
    assert!(
        logged.contains("variable=ACTORS_MAILBOX__CAPASITY"),
        "{logged}"
    );
    assert!(
        logged.contains("did_you_mean=\"ACTORS_MAILBOX__CAPACITY\""),
        "{logged}"
    );
}

#[test]
fn bad_values_name_the_key() {
    for (text, key, says) in [
        (
            "[mailbox]\ncapacity = \"lots\"",
            "mailbox.capacity",
            "found string \"lots\", expected usize",
        ),
        ("[mailbox]\ncapacity = 0", "mailbox.capacity", "at least 1"),
        (
            "[mailbox]\ncapacity = -5",
            "mailbox.capacity",
            "signed int `-5`, expected usize",
        ),
        (
            "[mailbox]\nbytes = -5",
            "mailbox.bytes",
            "must not be negative, found integer -5",
        ),
        ("[mailbox]\nbytes = \"64MB\"", "mailbox.bytes", "\"64MB\""),
        (
            "[heartbeat]\ninterval = \"10 parsecs\"",
            "heartbeat.interval",
            "expected a duration",
        ),
        (
            "[heartbeat]\ninterval = 10",
            "heartbeat.interval",
            "found signed int `10`, expected a duration",
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
            "[transport]\nsend_buffer_size = 0",
            "transport.send_buffer_size",
            "send_buffer_size must be greater than zero",
        ),
        (
            "[transport]\naccept_backlog = 0",
            "transport.accept_backlog",
            "accept_backlog must be greater than zero",
        ),
        (
            "[transport]\nrecv_buffer_size = \"5GiB\"",
            "transport.recv_buffer_size",
            "at most 4294967295",
        ),
        (
            "[transport]\nnodelay = \"yes\"",
            "transport.nodelay",
            "found string \"yes\", expected a boolean",
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
            "[reconnect_backoff]\nmin = \"0s\"",
            "reconnect_backoff.min",
            "backoff min must be greater than zero",
        ),
        (
            "[heartbeat]\nmin_std_deviation = \"0s\"",
            "heartbeat.min_std_deviation",
            "must be at least 1ms, found 0ns",
        ),
        (
            "[heartbeat]\nmax_samples = 1",
            "heartbeat.max_samples",
            "must be at least 2, found 1",
        ),
        (
            "[remote]\ndial_allow_list = [\"10.0.0.0/33\"]",
            "remote.dial_allow_list",
            "\"10.0.0.0/33\"",
        ),
        (
            "[remote]\nroutes = { \"b@h:1\" = \"nowhere\" }",
            "remote.routes",
            "b@h:1: expected a socket address like \"10.0.0.5:2552\", found string \"nowhere\"",
        ),
        (
            "[remote]\nlookup_paths = \"/user/a\"",
            "remote.lookup_paths",
            "found string \"/user/a\", expected a sequence",
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
    heartbeat.set_interval(Duration::from_secs(2)).unwrap();
    expected
        .set_mailbox_capacity(200)
        .unwrap()
        .set_max_associations(7)
        .unwrap()
        .set_heartbeat(heartbeat);

    let loaded = load_from(Some(&path), env.clone()).unwrap();
    assert_eq!(snapshot(&loaded), snapshot(&expected));
    // The same through the public steps, with the file's origin.
    let figment = Figment::from(Toml::file(&path)).merge(ActorsEnv::from_vars(env, true).unwrap());
    assert_eq!(
        snapshot(&SystemConfig::from_figment(&figment).unwrap()),
        snapshot(&expected)
    );
    std::fs::write(&path, "[mailbox]\ncapacity = 0\n").unwrap();
    let e = SystemConfig::from_toml_file(&path).unwrap_err();
    assert!(
        matches!(&e, ConfigError::InvalidValue { origin: ConfigOrigin::File(p), .. } if *p == path),
        "{e}"
    );

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
    let mut expected = ClusterConfig::new();
    expected
        .set_seeds(["10.0.0.1:2552", "seed.example:2552", "[::1]:2552"])
        .unwrap()
        .set_udp_bind("0.0.0.0:2553".parse().unwrap())
        .set_udp_advertise("203.0.113.5:0".parse().unwrap())
        .set_probe(Duration::from_secs(2), Duration::from_millis(250))
        .unwrap()
        .set_stable_after(Duration::from_secs(20))
        .set_downing(DowningStrategy::KeepOldest {
            down_if_alone: false,
        })
        .unwrap()
        .set_down_all_when_unstable(None)
        .set_shutdown_when_downed(false)
        .set_remove_down_after(Duration::from_secs(60))
        .set_announce_interval(Duration::from_millis(500))
        .unwrap()
        .set_max_packet_size(1024)
        .unwrap()
        .set_max_members(100)
        .unwrap()
        .set_event_capacity(16)
        .unwrap();
    assert_eq!(cluster_of(&loaded), format!("{expected:#?}"));
    // Nothing outside the section changed.
    let mut rest = loaded.clone();
    rest.cluster = ClusterSettings::default();
    assert_eq!(snapshot(&rest), snapshot(&SystemConfig::default()));

    let d = SystemConfig::from_toml_str("[cluster]\ndown_all_when_unstable = \"6s\"").unwrap();
    let mut expected = ClusterConfig::new();
    expected.set_down_all_when_unstable(Some(Duration::from_secs(6)));
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
        let mut expected = ClusterConfig::new();
        expected.set_downing(strategy.clone()).unwrap();
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
        (
            "stable_after = 10",
            "cluster.stable_after",
            "signed int `10`",
        ),
        (
            "seeds = [\"10.0.0.1\"]",
            "cluster.seeds",
            "host:port), found \"10.0.0.1\"",
        ),
        (
            "seeds = \"10.0.0.1:2552\"",
            "cluster.seeds",
            "found string \"10.0.0.1:2552\"",
        ),
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
            "expected a boolean",
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
    let mut expected = ClusterConfig::new();
    expected
        .set_seeds(["10.0.0.7:2552", "10.0.0.8:2552"])
        .unwrap()
        .set_probe(Duration::from_secs(2), Duration::from_millis(500))
        .unwrap()
        .set_downing(DowningStrategy::StaticQuorum { quorum_size: 2 })
        .unwrap()
        .set_down_all_when_unstable(None);
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
    // The environment on top of the file: checked with what the file set.
    let with = |list: &[(&str, &str)]| load_from(Some(&path), vars(list));
    with(&[("ACTORS_CLUSTER__QUORUM_SIZE", "none")]).unwrap_err();
    with(&[("ACTORS_CLUSTER__PROBE_RTT", "1s")]).unwrap();
    with(&[("ACTORS_CLUSTER__PROBE_RTT", "1001ms")]).unwrap_err();
}

/// An application's own file holds the library's settings in one table,
/// and errors name the whole key and the file.
#[test]
fn a_section_of_an_applications_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.toml");
    std::fs::write(
        &path,
        "[app]\ngreeting = \"hello\"\n[actors.mailbox]\ncapacity = 100\n\
         [actors.cluster]\nseeds = [\"10.0.0.1:2552\"]\n",
    )
    .unwrap();
    let app = Figment::from(Toml::file(&path));
    let config = SystemConfig::from_section(&app, "actors").unwrap();
    let mut expected = SystemConfig::default();
    expected.set_mailbox_capacity(100).unwrap();
    expected.cluster.seeds = vec!["10.0.0.1:2552".into()];
    assert_eq!(snapshot(&config), snapshot(&expected));
    // The variables on top, as the docs show.
    let env = ActorsEnv::from_vars(vars(&[("ACTORS_MAILBOX__CAPACITY", "7")]), true).unwrap();
    let config = SystemConfig::from_figment(&app.focus("actors").merge(env)).unwrap();
    assert_eq!(config.mailbox_capacity, 7);

    std::fs::write(&path, "[actors.mailbox]\ncapasity = 100\n").unwrap();
    let e = SystemConfig::from_section(&Figment::from(Toml::file(&path)), "actors").unwrap_err();
    assert!(
        matches!(&e, ConfigError::UnknownKey { origin: ConfigOrigin::File(p), .. } if *p == path),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("unknown key \"actors.mailbox.capasity\""),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("did you mean \"actors.mailbox.capacity\"?"),
        "{e}"
    );
    std::fs::write(&path, "[actors.remote]\nmax_associations = 0\n").unwrap();
    let e = SystemConfig::from_section(&Figment::from(Toml::file(&path)), "actors").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid value for \"actors.remote.max_associations\" in "),
        "{e}"
    );
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
