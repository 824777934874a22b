//! Trace-context propagation: the W3C Trace Context (`traceparent`) of a
//! request, carried in the envelopes of remote messages so that one
//! request can be followed across nodes (with OpenTelemetry or any tracer
//! that speaks W3C Trace Context).
//!
//! Off by default ([`SystemConfig::set_trace_propagation`](crate::SystemConfig::set_trace_propagation)):
//! then a send reads nothing and writes nothing extra. When it is on, a
//! remote send made inside a [`TraceContext::scope`] (or
//! [`sync_scope`](TraceContext::sync_scope)) carries that context in its
//! envelope (25 bytes), and the receiving actor handles the message
//! inside a scope of the same context: [`Ctx::trace_context`](crate::Ctx::trace_context)
//! and [`TraceContext::current`] return it, and the sends the handler
//! makes (replies to an ask included) carry it on.
//!
//! No dependency on OpenTelemetry: a bridge formats the current span's
//! context as a `traceparent` header and parses it back, e.g.
//!
//! ```
//! use actors::TraceContext;
//! // From the caller's span (OpenTelemetry: its SpanContext's trace id,
//! // span id and flags, or a propagator's injected "traceparent" header).
//! let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
//! let tc = TraceContext::parse_traceparent(header).unwrap();
//! assert!(tc.sampled());
//! // On the receiving side, in a handler: a child span's parent.
//! assert_eq!(tc.to_string(), header);
//! ```

use std::{fmt, future::Future};

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// A W3C Trace Context `traceparent`: trace id, parent (span) id and
/// trace flags (version `00`).
///
/// The wire form is 25 bytes: the trace id (16), the parent id (8) and
/// the flags (1); the version is always `00` (see `docs/PROTOCOL.md`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

/// Why a `traceparent` (a header string, or the bytes of an envelope) was
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid traceparent: {0}")]
pub struct TraceParentError(&'static str);

impl TraceContext {
    /// Bytes of the wire form.
    pub const WIRE_LEN: usize = 25;

    /// A context from its parts.
    ///
    /// # Errors
    /// An all-zero trace id or parent id, which W3C Trace Context defines
    /// as invalid.
    pub fn new(
        trace_id: [u8; 16],
        parent_id: [u8; 8],
        flags: u8,
    ) -> Result<Self, TraceParentError> {
        if trace_id == [0; 16] {
            return Err(TraceParentError("all-zero trace id"));
        }
        if parent_id == [0; 8] {
            return Err(TraceParentError("all-zero parent id"));
        }
        Ok(Self {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The trace id, the same for every span of one request.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The id of the span that sent the message (the receiver's parent).
    pub fn parent_id(&self) -> [u8; 8] {
        self.parent_id
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the caller recorded its span (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 != 0
    }

    /// The same trace with `parent_id` as the parent: what a handler that
    /// starts a span of its own sends on.
    ///
    /// # Errors
    /// An all-zero `parent_id`.
    pub fn with_parent_id(&self, parent_id: [u8; 8]) -> Result<Self, TraceParentError> {
        Self::new(self.trace_id, parent_id, self.flags)
    }

    /// Parses a `traceparent` header: `VERSION-TRACEID-PARENTID-FLAGS` in
    /// lowercase hex (`00-<32>-<16>-<2>`). A later version is read as
    /// version `00`, as W3C Trace Context asks, ignoring what follows the
    /// flags.
    ///
    /// # Errors
    /// A malformed header, version `ff`, or all-zero ids.
    pub fn parse_traceparent(s: &str) -> Result<Self, TraceParentError> {
        let b = s.as_bytes();
        if b.len() < 55 {
            return Err(TraceParentError("shorter than 55 characters"));
        }
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return Err(TraceParentError("fields not separated by '-'"));
        }
        let version = hex::<1>(&b[0..2])?[0];
        if version == 0xff {
            return Err(TraceParentError("version ff"));
        }
        if (version == 0 && b.len() != 55) || (version != 0 && b.len() > 55 && b[55] != b'-') {
            return Err(TraceParentError("unexpected characters after the flags"));
        }
        Self::new(hex(&b[3..35])?, hex(&b[36..52])?, hex::<1>(&b[53..55])?[0])
    }

    /// The context the current task (or thread, inside
    /// [`sync_scope`](Self::sync_scope)) runs in, if any.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(|t| *t).ok()
    }

    /// Runs `f` with this as the current context: remote sends made in it
    /// carry it (when propagation is on).
    pub async fn scope<F: Future>(self, f: F) -> F::Output {
        CURRENT.scope(self, f).await
    }

    /// Runs `f` with this as the current context, synchronously.
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self, f)
    }

    /// The wire form (see the type's docs).
    pub(crate) fn to_bytes(self) -> [u8; Self::WIRE_LEN] {
        let mut out = [0; Self::WIRE_LEN];
        out[..16].copy_from_slice(&self.trace_id);
        out[16..24].copy_from_slice(&self.parent_id);
        out[24] = self.flags;
        out
    }

    /// Reads the wire form.
    ///
    /// # Errors
    /// Too short, or invalid ids.
    pub(crate) fn from_bytes(b: &[u8]) -> Result<Self, TraceParentError> {
        let b: &[u8; Self::WIRE_LEN] = b
            .get(..Self::WIRE_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(TraceParentError("truncated"))?;
        let mut trace_id = [0; 16];
        trace_id.copy_from_slice(&b[..16]);
        let mut parent_id = [0; 8];
        parent_id.copy_from_slice(&b[16..24]);
        Self::new(trace_id, parent_id, b[24])
    }
}

/// Lowercase hex to bytes.
fn hex<const N: usize>(s: &[u8]) -> Result<[u8; N], TraceParentError> {
    let mut out = [0; N];
    if s.len() != 2 * N {
        return Err(TraceParentError("wrong field length"));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(TraceParentError("not lowercase hex")),
    };
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(s[2 * i])? << 4 | digit(s[2 * i + 1])?;
    }
    Ok(out)
}

/// The `traceparent` header string, version `00`.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.parent_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceContext({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_round_trips_as_text_and_bytes() {
        let tc = TraceContext::parse_traceparent(HEADER).unwrap();
        assert_eq!(tc.to_string(), HEADER);
        assert_eq!(
            tc.parent_id(),
            [0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert!(tc.sampled());
        assert_eq!(TraceContext::from_bytes(&tc.to_bytes()), Ok(tc));
        // A later version reads as 00, ignoring what it appends.
        let v1 = format!("01{}-extra", &HEADER[2..]);
        assert_eq!(TraceContext::parse_traceparent(&v1), Ok(tc));
    }

    #[test]
    fn malformed_traceparents_are_named() {
        let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let zero_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        for (bad, why) in [
            ("", "shorter"),
            (&HEADER.replace('-', "_"), "separated"),
            (&HEADER.to_uppercase(), "hex"),
            (&format!("ff{}", &HEADER[2..]), "version ff"),
            (&format!("{HEADER}-x"), "after the flags"),
            (zero_trace, "all-zero trace id"),
            (zero_parent, "all-zero parent id"),
        ] {
            let err = TraceContext::parse_traceparent(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(TraceContext::from_bytes(&[1; 24]).is_err());
        assert!(TraceContext::from_bytes(&[0; 25]).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn scopes_set_the_current_context() {
        let tc = TraceContext::parse_traceparent(HEADER).unwrap();
        assert_eq!(TraceContext::current(), None);
        tc.scope(async {
            assert_eq!(TraceContext::current(), Some(tc));
            let child = tc.with_parent_id([1; 8]).unwrap();
            child.sync_scope(|| assert_eq!(TraceContext::current(), Some(child)));
            assert_eq!(TraceContext::current(), Some(tc));
        })
        .await;
        assert_eq!(TraceContext::current(), None);
    }
}
