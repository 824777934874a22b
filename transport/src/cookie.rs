//! Where a node's shared secret comes from when none is configured: the
//! `ACTORS_COOKIE` environment variable, else a per-user cookie file that
//! the first node to start creates (Erlang's cookie, done with the same
//! care about permissions and a race-free first start).
//!
//! ```text
//! set_shared_secret(Some(s)) ──► s                      (explicit wins over everything)
//! set_insecure_no_authentication(true) ──► no secret    (loudly logged at bind)
//! ACTORS_COOKIE non-empty ──► its bytes
//! cookie file (set_cookie_file, else $HOME/.actors.cookie)
//!     exists ──► mode must be 0600-like (no group/other bits), content trimmed
//!     missing ──► 32 random bytes, hex, written to a temp file (0600),
//!                 hard-linked into place (never overwrites); the loser of a
//!                 race reads the winner's file
//! ```
//!
//! Resolution runs once, when an endpoint is bound; never per connection.
//! [`plan`] (which source applies) is pure, so its precedence is tested
//! without touching the environment.

use std::{
    ffi::OsStr,
    fs, io,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    auth::SharedSecret,
    error::{ConfigError, SecretSource},
};

/// The environment variable a node reads its shared secret from when none
/// is configured. Empty counts as unset.
pub const COOKIE_ENV: &str = "ACTORS_COOKIE";
/// The cookie file's name in the user's home directory, used when neither
/// a secret, [`COOKIE_ENV`], nor
/// [`TransportConfig::set_cookie_file`](crate::TransportConfig::set_cookie_file)
/// says otherwise.
pub const DEFAULT_COOKIE_FILE_NAME: &str = ".actors.cookie";
/// Random bytes in a new cookie (written as 64 hex digits): 256 bits, far
/// beyond guessing.
const COOKIE_RANDOM_BYTES: usize = 32;
/// How often a reader re-reads an empty cookie file, and how long it waits
/// between reads: a file created by someone else with `O_EXCL` and then
/// written may be seen empty for an instant. Our own creation publishes a
/// complete file (hard link), so this only covers other writers; 50 × 10 ms
/// is half a second, once, at bind.
const EMPTY_RETRIES: u32 = 50;
const EMPTY_RETRY_DELAY: Duration = Duration::from_millis(10);

/// Which source supplies the secret. Pure: the environment value and the
/// home directory are passed in.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    /// An explicitly configured secret.
    Configured(SharedSecret),
    /// No authentication, explicitly asked for.
    Insecure,
    /// The environment variable's value.
    Environment(Vec<u8>),
    /// Read (or create) this cookie file.
    CookieFile(PathBuf),
}

/// Picks the secret's source. Precedence: an explicit secret, then the
/// insecure opt-in (explicit configuration beats the environment), then a
/// non-empty `env` ([`COOKIE_ENV`]), then `cookie_file`, else
/// `home/.actors.cookie`.
///
/// # Errors
/// [`ConfigError::NoSecret`] when nothing applies (no home directory).
pub(crate) fn plan(
    explicit: Option<&SharedSecret>,
    insecure: bool,
    env: Option<&OsStr>,
    cookie_file: Option<&Path>,
    home: Option<&Path>,
) -> Result<Plan, ConfigError> {
    if let Some(s) = explicit {
        return Ok(Plan::Configured(s.clone()));
    }
    if insecure {
        return Ok(Plan::Insecure);
    }
    if let Some(v) = env.filter(|v| !v.is_empty()) {
        return Ok(Plan::Environment(v.as_encoded_bytes().to_vec()));
    }
    if let Some(p) = cookie_file {
        return Ok(Plan::CookieFile(p.to_owned()));
    }
    match home {
        Some(h) if !h.as_os_str().is_empty() => {
            Ok(Plan::CookieFile(h.join(DEFAULT_COOKIE_FILE_NAME)))
        }
        _ => Err(ConfigError::NoSecret),
    }
}

/// Carries out a [`Plan`]: the secret in force (`None` only for
/// [`Plan::Insecure`]), validated.
///
/// # Errors
/// A secret that is too short, or a cookie file that cannot be read,
/// created, or is readable by others.
pub(crate) fn resolve(plan: Plan) -> Result<Option<SharedSecret>, ConfigError> {
    let secret = match plan {
        Plan::Insecure => return Ok(None),
        Plan::Configured(s) => s,
        Plan::Environment(v) => SharedSecret::new(v).with_source(SecretSource::Environment),
        Plan::CookieFile(path) => {
            let cookie = load_or_create(&path)?;
            SharedSecret::new(cookie).with_source(SecretSource::CookieFile(path))
        }
    };
    secret.validate()?;
    Ok(Some(secret))
}

fn cookie_error(path: &Path, what: &str, e: &io::Error) -> ConfigError {
    ConfigError::CookieFile {
        path: path.to_owned(),
        reason: format!("{what}: {e}"),
    }
}

/// The shared secret in the cookie file `path`, created with a random
/// cookie if missing (as a node does at bind for its default cookie file),
/// checked for owner-only permissions. For an explicit secret file: pass
/// the result to
/// [`TransportConfig::set_shared_secret`](crate::TransportConfig::set_shared_secret),
/// where it wins over `ACTORS_COOKIE`; errors and mismatches name `path`.
///
/// # Errors
/// As for the default cookie file: the file cannot be read or created,
/// others may access it, or it holds fewer than
/// [`MIN_SECRET_LEN`](crate::MIN_SECRET_LEN) bytes.
pub fn load_cookie_file(path: impl AsRef<Path>) -> Result<SharedSecret, ConfigError> {
    let path = path.as_ref();
    let secret = SharedSecret::new(load_or_create(path)?)
        .with_source(SecretSource::CookieFile(path.to_owned()));
    secret.validate()?;
    Ok(secret)
}

/// The cookie in `path`, creating the file with a random cookie if it does
/// not exist. Two nodes starting at once, in one process or two, end up
/// with the same cookie: creation never overwrites.
///
/// # Errors
/// The file cannot be read or created, is not a regular file, is
/// accessible by group or others, or stays empty.
pub(crate) fn load_or_create(path: &Path) -> Result<Vec<u8>, ConfigError> {
    match fs::symlink_metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => create(path)?,
        Err(e) => return Err(cookie_error(path, "cannot inspect", &e)),
    }
    for attempt in 0..=EMPTY_RETRIES {
        let cookie = read(path)?;
        if !cookie.is_empty() {
            return Ok(cookie);
        }
        if attempt < EMPTY_RETRIES {
            // Another process created the file and has not written it yet.
            std::thread::sleep(EMPTY_RETRY_DELAY);
        }
    }
    Err(ConfigError::CookieFile {
        path: path.to_owned(),
        reason: "the file is empty; delete it to have a new cookie generated, or write one (at least 16 characters)".into(),
    })
}

/// Reads and checks an existing cookie file: trimmed content.
fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let meta = fs::metadata(path).map_err(|e| cookie_error(path, "cannot inspect", &e))?;
    if !meta.is_file() {
        return Err(ConfigError::CookieFile {
            path: path.to_owned(),
            reason: "not a regular file".into(),
        });
    }
    check_permissions(path, &meta)?;
    let bytes = fs::read(path).map_err(|e| cookie_error(path, "cannot read", &e))?;
    Ok(bytes.trim_ascii().to_vec())
}

#[cfg(unix)]
fn check_permissions(path: &Path, meta: &fs::Metadata) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ConfigError::CookiePermissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_permissions(_: &Path, _: &fs::Metadata) -> Result<(), ConfigError> {
    Ok(())
}

/// Creates `path` with a fresh random cookie, atomically and without
/// overwriting: the content goes to a private temp file first, which is
/// then hard-linked to `path` (fails if `path` exists: someone else won,
/// and their cookie is used). Where hard links are not supported, falls
/// back to an exclusive create and write (readers retry while it is empty).
fn create(path: &Path) -> Result<(), ConfigError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The cookie, then 8 more random bytes that name the temp file.
    let mut random = [0u8; COOKIE_RANDOM_BYTES + 8];
    getrandom::fill(&mut random).map_err(|e| ConfigError::CookieFile {
        path: path.to_owned(),
        reason: format!("no OS randomness to generate a cookie: {e}"),
    })?;
    let (secret, tag) = random.split_at(COOKIE_RANDOM_BYTES);
    let cookie = hex(secret);
    let tmp = dir.join(format!(
        ".{}.tmp.{}.{}",
        path.file_name().and_then(OsStr::to_str).unwrap_or("cookie"),
        std::process::id(),
        hex(tag)
    ));
    write_new(&tmp, cookie.as_bytes()).map_err(|e| cookie_error(path, "cannot create", &e))?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            tracing::info!(path = %path.display(), "created a new cookie file (shared secret for this user's nodes)");
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(_) => match write_new(path, cookie.as_bytes()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(cookie_error(path, "cannot create", &e)),
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `content` to a new file at `path` with owner-only permissions;
/// fails if `path` exists.
fn write_new(path: &Path, content: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(content)?;
    f.write_all(b"\n")?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &[u8] = b"0123456789abcdef-explicit";

    #[test]
    fn precedence_explicit_then_insecure_then_env_then_file_then_home() {
        let secret = SharedSecret::new(S);
        let env = Some(OsStr::new("from-the-environment-0123"));
        let file = Some(Path::new("/etc/node.cookie"));
        let home = Some(Path::new("/home/u"));
        assert!(matches!(
            plan(Some(&secret), true, env, file, home),
            Ok(Plan::Configured(s)) if s.source() == &SecretSource::Configured
        ));
        assert!(matches!(
            plan(None, true, env, file, home),
            Ok(Plan::Insecure)
        ));
        assert!(matches!(
            plan(None, false, env, file, home),
            Ok(Plan::Environment(v)) if v == b"from-the-environment-0123"
        ));
        assert!(
            matches!(
                plan(None, false, Some(OsStr::new("")), file, home),
                Ok(Plan::CookieFile(p)) if p == Path::new("/etc/node.cookie")
            ),
            "an empty variable counts as unset"
        );
        assert!(matches!(
            plan(None, false, None, None, home),
            Ok(Plan::CookieFile(p)) if p == Path::new("/home/u/.actors.cookie")
        ));
        assert!(matches!(
            plan(None, false, None, None, None),
            Err(ConfigError::NoSecret)
        ));
    }

    #[test]
    fn environment_secret_is_validated_and_named() {
        let s = resolve(Plan::Environment(b"0123456789abcdef".to_vec()))
            .unwrap()
            .unwrap();
        assert_eq!(s.source(), &SecretSource::Environment);
        assert!(matches!(
            resolve(Plan::Environment(b"short".to_vec())),
            Err(ConfigError::SecretTooShort { len: 5, .. })
        ));
        assert!(matches!(resolve(Plan::Insecure), Ok(None)));
    }

    #[cfg(unix)]
    #[test]
    fn cookie_is_created_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cookie");
        let first = load_or_create(&path).unwrap();
        assert_eq!(first.len(), 2 * COOKIE_RANDOM_BYTES);
        assert!(first.iter().all(u8::is_ascii_hexdigit));
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_create(&path).unwrap(), first, "reused");
        // Nothing left behind but the cookie.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn racing_creators_agree() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cookie");
        let barrier = std::sync::Barrier::new(8);
        let cookies: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        load_or_create(&path).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(cookies.windows(2).all(|w| w[0] == w[1]), "{cookies:?}");
    }

    #[cfg(unix)]
    #[test]
    fn group_readable_cookie_is_refused_with_a_remedy() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cookie");
        fs::write(&path, "0123456789abcdef0123").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        let err = load_or_create(&path).unwrap_err();
        assert_eq!(
            err,
            ConfigError::CookiePermissions {
                path: path.clone(),
                mode: 0o640
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("chmod 600"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
    }

    #[cfg(unix)]
    #[test]
    fn existing_cookie_is_trimmed_and_empty_one_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cookie");
        fs::write(&path, "  0123456789abcdef\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_or_create(&path).unwrap(), b"0123456789abcdef");
        fs::write(&path, "\n").unwrap();
        assert!(matches!(
            load_or_create(&path),
            Err(ConfigError::CookieFile { .. })
        ));
    }
}
