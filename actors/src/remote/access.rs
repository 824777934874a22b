//! Which requests from peers a node honours, beyond delivering messages to
//! actors whose refs they hold: authorization, separate from the
//! authentication the transport does (Akka's `untrusted-mode`).
//!
//! - Ask reply slots (`/temp/...`) are never looked up: only a node that
//!   was handed a reply ref can address it (its id is 64 random bits).
//! - In untrusted mode a remote `stop` is refused (counted as a dead
//!   letter), and `Identify` (what `resolve` asks) is answered only for
//!   paths on the lookup list; other paths look absent. Watch is allowed.

use crate::config::SystemConfig;

/// The policy of one node. Pure.
#[derive(Debug, Clone, Default)]
pub(super) struct Access {
    untrusted: bool,
    /// Paths `resolve` may find in untrusted mode: exact, or a subtree
    /// when the entry ends with `/`.
    lookup: Vec<String>,
}

impl Access {
    pub(super) fn new(config: &SystemConfig) -> Self {
        Self {
            untrusted: config.untrusted_mode,
            lookup: config.lookup_paths.clone(),
        }
    }

    /// Whether a peer's lookup of `path` (its elements, `/user/a`) is
    /// answered.
    pub(super) fn may_identify(&self, path: &str) -> bool {
        if path.starts_with("/temp/") || path == "/temp" {
            return false;
        }
        !self.untrusted
            || self
                .lookup
                .iter()
                .any(|p| path == p || (p.ends_with('/') && path.starts_with(p.as_str())))
    }

    /// Whether a peer may stop this node's actors.
    pub(super) fn may_stop(&self) -> bool {
        !self.untrusted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_slots_are_never_looked_up() {
        let open = Access::default();
        assert!(open.may_identify("/user/a"));
        assert!(!open.may_identify("/temp/$00ff"));
        assert!(!open.may_identify("/temp"));
        assert!(open.may_stop());
    }

    #[test]
    fn untrusted_mode_answers_only_listed_paths_and_refuses_stop() {
        let mut config = SystemConfig::default();
        config
            .set_untrusted_mode(true)
            .set_lookup_paths(["/user/api", "/user/workers/"]);
        let a = Access::new(&config);
        assert!(a.may_identify("/user/api"));
        assert!(!a.may_identify("/user/api2"), "exact unless it ends with /");
        assert!(a.may_identify("/user/workers/w1"));
        assert!(!a.may_identify("/user/admin"));
        assert!(!a.may_identify("/temp/$1"));
        assert!(!a.may_stop());
    }
}
