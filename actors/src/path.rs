//! Actor addresses a person can read and type.
//!
//! ```text
//! tcp://system@host:port/user/name      an actor on a node with remoting
//! local://system/user/name              an actor on a system without remoting
//!        └─node─────────┘└─elements──┘
//! ```
//!
//! Top-level element `user` holds spawned actors (`/user/$7` for anonymous
//! ones), `temp` holds the reply refs of asks.

use std::{fmt, sync::Arc};

use crate::error::ResolveError;

/// Longest path accepted, in bytes (`tcp://`, node and elements): paths
/// arrive from peers inside messages and travel in envelopes, so they are
/// bounded where they are parsed. A node name is at most 255 bytes (the
/// transport's advertised-address bound), which leaves 765 for elements.
pub const MAX_PATH_LEN: usize = 1024;
/// Most elements in a path (`/user/a/b` has 3).
pub const MAX_PATH_ELEMENTS: usize = 32;
/// Longest actor name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// A parsed actor path. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ActorPath {
    node: Arc<str>,
    elements: Arc<str>,
    remote: bool,
}

impl ActorPath {
    pub(crate) fn new(node: Arc<str>, remote: bool, elements: &str) -> Self {
        Self {
            node,
            elements: elements.into(),
            remote,
        }
    }

    /// Parses `tcp://system@host:port/user/name` or
    /// `local://system/user/name`.
    ///
    /// ```
    /// let p = actors::ActorPath::parse("tcp://bench@127.0.0.1:2552/user/echo").unwrap();
    /// assert_eq!(p.node(), "bench@127.0.0.1:2552");
    /// assert_eq!(p.elements(), "/user/echo");
    /// assert_eq!(p.to_string(), "tcp://bench@127.0.0.1:2552/user/echo");
    /// ```
    ///
    /// # Errors
    /// [`ResolveError::InvalidPath`] saying what is wrong.
    pub fn parse(s: &str) -> Result<Self, ResolveError> {
        let bad = |reason| ResolveError::InvalidPath {
            path: transport::PeerText(s).to_string(),
            reason,
        };
        if s.len() > MAX_PATH_LEN {
            return Err(bad("longer than MAX_PATH_LEN (1024 bytes)"));
        }
        let (remote, rest) = if let Some(r) = s.strip_prefix("tcp://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("local://") {
            (false, r)
        } else {
            return Err(bad("must start with tcp:// or local://"));
        };
        let slash = rest
            .find('/')
            .ok_or_else(|| bad("no path after the node"))?;
        let (node, elements) = rest.split_at(slash);
        if remote {
            let (system, hostport) = node
                .split_once('@')
                .ok_or_else(|| bad("node must be system@host:port"))?;
            if system.is_empty() || !hostport.contains(':') {
                return Err(bad("node must be system@host:port"));
            }
        } else if node.is_empty() || node.contains('@') {
            return Err(bad("local node must be a system name"));
        }
        if elements.len() < 2 || elements.ends_with('/') || elements.contains("//") {
            return Err(bad("path elements must be /a/b with no empty element"));
        }
        if elements.matches('/').count() > MAX_PATH_ELEMENTS {
            return Err(bad("more than MAX_PATH_ELEMENTS (32) elements"));
        }
        // Every name a path can carry, a reply ref's included: a peer's
        // ref to a name no actor can have is refused where it is decoded.
        if elements[1..].split('/').any(|n| n.len() > MAX_NAME_LEN) {
            return Err(bad("a name longer than MAX_NAME_LEN (128 bytes)"));
        }
        Ok(Self {
            node: node.into(),
            elements: elements.into(),
            remote,
        })
    }

    /// The node part: `system@host:port` (or the system name for local).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The element part, starting with `/`.
    pub fn elements(&self) -> &str {
        &self.elements
    }

    /// True for a `tcp://` path.
    pub fn is_remote(&self) -> bool {
        self.remote
    }

    /// The `host:port` of a `tcp://` path.
    pub fn host_port(&self) -> Option<&str> {
        if self.remote {
            self.node.split_once('@').map(|(_, hp)| hp)
        } else {
            None
        }
    }

    /// The system name.
    pub fn system(&self) -> &str {
        self.node.split_once('@').map_or(&self.node, |(s, _)| s)
    }
}

impl fmt::Display for ActorPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.remote { "tcp" } else { "local" };
        write!(f, "{scheme}://{}{}", self.node, self.elements)
    }
}

impl fmt::Debug for ActorPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// True for a name `spawn_named` accepts.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with('$')
        && !name
            .chars()
            .any(|c| matches!(c, '/' | '#' | '@' | ':') || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_over_128_bytes_does_not_parse() {
        let at_limit = format!("tcp://s@h:1/temp/{}", "n".repeat(MAX_NAME_LEN));
        assert!(ActorPath::parse(&at_limit).is_ok());
        let over = format!("tcp://s@h:1/temp/{}/x", "n".repeat(MAX_NAME_LEN + 1));
        let err = ActorPath::parse(&over).unwrap_err().to_string();
        assert!(
            err.contains("longer than MAX_NAME_LEN (128 bytes)"),
            "{err}"
        );
    }

    #[test]
    fn long_paths_are_refused_when_parsed() {
        // Names at most MAX_NAME_LEN, filling MAX_PATH_LEN.
        let mut ok = String::from("tcp://s@h:1/user");
        while ok.len() + 1 + MAX_NAME_LEN < MAX_PATH_LEN {
            ok.push('/');
            ok.push_str(&"a".repeat(MAX_NAME_LEN));
        }
        ok.push('/');
        ok.push_str(&"a".repeat(MAX_PATH_LEN - ok.len()));
        assert_eq!(ok.len(), MAX_PATH_LEN);
        assert!(ActorPath::parse(&ok).is_ok());
        let long = format!("{ok}b");
        let err = ActorPath::parse(&long).unwrap_err().to_string();
        assert!(err.contains("longer than MAX_PATH_LEN"), "{err}");
        assert!(err.len() < 400, "the path in the error is truncated: {err}");
        let deep = format!("tcp://s@h:1{}", "/a".repeat(MAX_PATH_ELEMENTS + 1));
        let err = ActorPath::parse(&deep).unwrap_err().to_string();
        assert!(err.contains("MAX_PATH_ELEMENTS"), "{err}");
        assert!(
            ActorPath::parse(&format!("tcp://s@h:1{}", "/a".repeat(MAX_PATH_ELEMENTS))).is_ok()
        );
        assert!(!valid_name(&"n".repeat(MAX_NAME_LEN + 1)));
        assert!(valid_name(&"n".repeat(MAX_NAME_LEN)));
    }

    #[test]
    fn parse_and_print() {
        for s in [
            "tcp://sys@127.0.0.1:2552/user/a",
            "tcp://sys@[::1]:2552/user/a/b",
            "local://sys/temp/$3",
        ] {
            assert_eq!(ActorPath::parse(s).unwrap().to_string(), s);
        }
        let p = ActorPath::parse("tcp://sys@h:1/user/a").unwrap();
        assert_eq!(p.host_port(), Some("h:1"));
        assert_eq!(p.system(), "sys");
        assert_eq!(ActorPath::parse("local://s/user/x").unwrap().system(), "s");
    }

    #[test]
    fn rejects_with_reason() {
        for s in [
            "http://x/user/a",
            "tcp://sys@h:1",
            "tcp://h:1/user/a",
            "tcp://sys@h:1/",
            "tcp://sys@h:1/user//a",
            "local://a@b/user/x",
        ] {
            assert!(
                matches!(ActorPath::parse(s), Err(ResolveError::InvalidPath { .. })),
                "{s}"
            );
        }
    }

    #[test]
    fn names() {
        assert!(valid_name("echo-1"));
        for n in ["", "$a", "a/b", "a b", "a@b", "a#b"] {
            assert!(!valid_name(n), "{n}");
        }
    }
}
