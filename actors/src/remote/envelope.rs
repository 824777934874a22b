//! The envelope: the body of a transport `Message` frame, which carries one
//! user message (or one fragment of a large one) to one recipient. Pure:
//! parse and encode, no state, no IO.
//!
//! ```text
//! +-------+-----------+------------------------------+-------------+---------+
//! | flags | id u32 LE | if flags&1: len u16 LE, path | manifest u32| payload |
//! +-------+-----------+------------------------------+-------------+---------+
//! ```
//!
//! Flag bit 3 ([`ENV_REPLY`]): an ask's reply path (u16 LE length, path)
//! follows the recipient path (if any).
//!
//! Flag bit 6 ([`ENV_STOP`]): a graceful stop (`stop_after_queued`), not a
//! message: the payload is empty, the manifest is the recipient's, and the
//! receiver queues a stop marker behind the messages that came before it.
//!
//! Flag bit 0 ([`ENV_DEFINE`]): the envelope defines its recipient id with
//! a path (see `compression`). Flag bit 2 ([`ENV_INLINE`]): the recipient
//! is the path in this envelope, and nothing is kept (the id is 0 and
//! ignored). Flag bit 1 ([`ENV_FRAGMENT`]): the payload is one fragment of
//! a large message, and a fragment header follows the manifest:
//!
//! ```text
//! ... | manifest u32 | msg id u32 LE | total u32 LE | offset u32 LE | piece |
//! ```
//!
//! Flag bit 4 ([`ENV_EXT`]): the message begins with an extension block
//! (which serializer wrote it, a trace context; see `serialization::Ext`).
//! For a fragmented message the block begins the reassembled payload, and
//! every fragment carries the flag.
//!
//! Flag bit 5 ([`ENV_RUN`]), only ever alone: the envelope carries a run of
//! messages of one type to one recipient whose id the link knows, as
//! records in the form mailboxes queue them, so that frame, envelope and
//! recipient are paid once per run instead of once per message:
//!
//! ```text
//! | 0x20 | id u32 LE | manifest u32 | len u32 LE | payload | len u32 LE | payload | ...
//! ```
//!
//! At least one record; each length is below 2^31 and the records fill
//! the envelope exactly. A node sends runs only to a peer that announced
//! [`APP_RUNS`] in its handshake, so a node that does not know them never
//! gets one. Bit 7 is unknown: an envelope with it is malformed.

use std::fmt;

use bytes::{Buf, BufMut, BytesMut};

use crate::dead_letter::MalformedKind;

/// Why an envelope does not parse. Never allocates; `Display` is the
/// text a dead letter and a log line show, [`label`](Self::label) a name
/// that stays put when the text is reworded.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnvelopeError {
    /// Fewer bytes than flags and recipient id.
    Short,
    /// A flag beyond [`PLAIN_FLAGS`], from [`parse_plain`]: not malformed
    /// yet; read the envelope again with [`parse_unusual`].
    Unusual,
    /// A flag this node does not know (a newer node's feature?).
    UnknownFlags,
    /// The recipient path's length or bytes are cut off.
    TruncatedRecipient,
    /// The recipient path is not UTF-8.
    RecipientNotUtf8,
    /// The reply path's length or bytes are cut off.
    TruncatedReply,
    /// The reply path is not UTF-8.
    ReplyNotUtf8,
    /// No room for the manifest.
    NoManifest,
    /// [`ENV_RUN`] with another flag.
    RunWithFlags,
    /// [`ENV_STOP`] with a payload or a fragment.
    StopWithPayload,
    /// A fragment header cut off.
    TruncatedFragment,
    /// The message's extension block does not parse; what
    /// `serialization::Ext::parse` says of it.
    ExtensionBlock(&'static str),
}

impl EnvelopeError {
    /// A short stable name of the fault, for logs and tests.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::Unusual => "unusual",
            Self::UnknownFlags => "unknown_flags",
            Self::TruncatedRecipient => "truncated_recipient",
            Self::RecipientNotUtf8 => "recipient_not_utf8",
            Self::TruncatedReply => "truncated_reply",
            Self::ReplyNotUtf8 => "reply_not_utf8",
            Self::NoManifest => "no_manifest",
            Self::RunWithFlags => "run_with_flags",
            Self::StopWithPayload => "stop_with_payload",
            Self::TruncatedFragment => "truncated_fragment",
            Self::ExtensionBlock(_) => "extension_block",
        }
    }

    /// What a malformed envelope is counted as.
    pub(crate) fn kind(self) -> MalformedKind {
        match self {
            Self::ExtensionBlock(_) => MalformedKind::ExtensionBlock,
            _ => MalformedKind::Envelope,
        }
    }

    /// The human text.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Short => "envelope shorter than its header",
            Self::Unusual => "envelope flags beyond the plain ones",
            Self::UnknownFlags => "unknown envelope flags (a newer node's feature?)",
            Self::TruncatedRecipient => "truncated recipient path",
            Self::RecipientNotUtf8 => "recipient path is not utf-8",
            Self::TruncatedReply => "truncated reply path",
            Self::ReplyNotUtf8 => "reply path is not utf-8",
            Self::NoManifest => "envelope has no manifest",
            Self::RunWithFlags => "a run envelope with other flags",
            Self::StopWithPayload => "a stop envelope with a payload",
            Self::TruncatedFragment => "truncated fragment header",
            Self::ExtensionBlock(why) => why,
        }
    }
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Flag: the envelope defines its recipient id with a path.
pub(crate) const ENV_DEFINE: u8 = 1;
/// Flag: the envelope carries one fragment of a large message; a fragment
/// header follows the manifest.
pub(crate) const ENV_FRAGMENT: u8 = 2;
/// Flag: the recipient is the path in this envelope, used once (ask reply
/// slots, and recipients past a link's id limit).
pub(crate) const ENV_INLINE: u8 = 4;
/// Flag: the message is an ask's request; the path of its reply slot on
/// the sending node (u16 LE length, then the path) follows the recipient
/// path, so the receiving node can tell the asker at once when the
/// message is a dead letter (`SysWire::Undeliverable`).
pub(crate) const ENV_REPLY: u8 = 8;
/// Flag: the envelope is a graceful stop (`ActorRef::stop_after_queued`)
/// rather than a message. It travels on the user lane like one, so it is
/// ordered with the messages sent before it; its payload is empty.
pub(crate) const ENV_STOP: u8 = 64;
/// Flag: the message begins with an extension block (`serialization::Ext`):
/// a serializer other than bincode, or a trace context. Never set for a
/// bincode message without a trace context, so those cost no byte.
pub(crate) const ENV_EXT: u8 = 16;
/// Flag: the envelope carries a run of records to one recipient (see the
/// module docs); no other flag may be set with it.
pub(crate) const ENV_RUN: u8 = 32;
/// The application flag (`transport::TransportConfig::set_app_flags`) by
/// which a node announces that it takes [`ENV_RUN`] envelopes.
pub(crate) const APP_RUNS: u8 = 1;
/// A run envelope is extended while its frame's body is below this many
/// bytes: 16 KiB, about 150 messages of 100 bytes, where frame and
/// envelope cost less than 2 % of the run's handling and a frame cut by a
/// read's end is cheap to carry over.
pub(crate) const RUN_BYTES: usize = 16 * 1024;
/// Every flag this node understands.
const KNOWN_FLAGS: u8 = PLAIN_FLAGS | ENV_EXT;
/// The flags `parse` reads inline; others take its out-of-line path.
const PLAIN_FLAGS: u8 = ENV_DEFINE | ENV_FRAGMENT | ENV_INLINE | ENV_REPLY | ENV_STOP | ENV_RUN;
/// Fragment header: message id, total payload length, offset (u32 LE each).
pub(crate) const FRAGMENT_HEADER: usize = 12;
/// Fixed envelope header: flags, id, manifest.
pub(crate) const ENV_HEADER: usize = 1 + 4 + 4;

/// An envelope's fields, borrowed from the frame body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    pub(crate) id: u32,
    /// The recipient path this envelope defines `id` as, or (`inline`)
    /// names its recipient with.
    pub(crate) define: Option<&'a str>,
    /// The path names the recipient for this envelope only.
    pub(crate) inline: bool,
    /// An ask's reply slot on the sending node (`ENV_REPLY`).
    pub(crate) reply: Option<&'a str>,
    pub(crate) manifest: u32,
    /// The message begins with an extension block (`ENV_EXT`); checked
    /// here unless the payload is a fragment.
    pub(crate) ext: bool,
    /// A message, a fragment of a large one, or a graceful stop: one field,
    /// so that the hot path tells them apart with one test.
    pub(crate) kind: Kind,
    pub(crate) payload: &'a [u8],
}

/// What an envelope carries besides its recipient and manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A whole message: the payload.
    Message,
    /// One fragment of a large message (`ENV_FRAGMENT`).
    Fragment(Fragment),
    /// A graceful stop (`ENV_STOP`); the payload is empty.
    Stop,
    /// A run of messages (`ENV_RUN`); the payload is their records,
    /// unchecked.
    Run,
}

/// What an envelope says about the message it carries: its manifest id,
/// and whether it begins with an extension block (`ENV_EXT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tag {
    pub(crate) manifest: u32,
    pub(crate) ext: bool,
}

impl Tag {
    /// A bincode message without a trace context.
    #[cfg(test)]
    pub(crate) const fn plain(manifest: u32) -> Self {
        Self {
            manifest,
            ext: false,
        }
    }

    /// The envelope flag this adds.
    #[inline(always)]
    fn flags(self) -> u8 {
        if self.ext { ENV_EXT } else { 0 }
    }
}

/// Where a fragment's payload belongs (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fragment {
    /// The large message's id, per sending association.
    pub(crate) msg: u32,
    /// The whole message's payload length.
    pub(crate) total: u32,
    /// Where this fragment's payload starts in it.
    pub(crate) offset: u32,
}

/// Envelope bytes around a payload, at most: the header plus a path of
/// `path_len` bytes (when the envelope defines the recipient's id).
pub(crate) fn overhead(path_len: usize) -> usize {
    ENV_HEADER + 2 + path_len
}

/// Parses an envelope; the error says what is malformed. Never panics,
/// never allocates.
#[inline]
pub(crate) fn parse(body: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    match parse_plain(body) {
        Err(EnvelopeError::Unusual) => parse_unusual(body),
        parsed => parsed,
    }
}

/// `parse` of the envelopes on the hot path: an envelope with a flag
/// beyond [`PLAIN_FLAGS`] (the extension block's, or one this node does
/// not know) is refused with [`EnvelopeError::Unusual`]; the caller then
/// reads it with [`parse_unusual`], out of line. So a plain
/// envelope costs one test of its flags more than before the block
/// existed, and its `ext` is a constant `false`.
#[inline]
pub(crate) fn parse_plain(body: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    parse_as::<false>(body)
}

/// `parse` of an envelope with a flag beyond [`PLAIN_FLAGS`]: the
/// extension block's, or one this node does not know (malformed).
#[cold]
#[inline(never)]
pub(crate) fn parse_unusual(body: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    if body[0] & !KNOWN_FLAGS != 0 {
        return Err(EnvelopeError::UnknownFlags);
    }
    let env = parse_as::<true>(body)?;
    if !matches!(env.kind, Kind::Fragment(_)) {
        // Checked here, so a malformed block counts against the peer like
        // any malformed envelope; the actor's task reads it again.
        crate::serialization::Ext::parse(env.payload).map_err(EnvelopeError::ExtensionBlock)?;
    }
    Ok(env)
}

/// The envelope's fields; `CHECKED`: the flags were checked by
/// `parse_unusual`, else any flag beyond [`PLAIN_FLAGS`] is refused with
/// [`EnvelopeError::Unusual`].
#[inline(always)]
fn parse_as<const CHECKED: bool>(body: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    let mut b = body;
    if b.len() < 5 {
        return Err(EnvelopeError::Short);
    }
    let flags = b.get_u8();
    if !CHECKED && flags & !PLAIN_FLAGS != 0 {
        return Err(EnvelopeError::Unusual);
    }
    let id = b.get_u32_le();
    let mut define = None;
    let inline = flags & ENV_INLINE != 0;
    if flags & (ENV_DEFINE | ENV_INLINE) != 0 {
        if b.len() < 2 {
            return Err(EnvelopeError::TruncatedRecipient);
        }
        let len = usize::from(b.get_u16_le());
        if b.len() < len {
            return Err(EnvelopeError::TruncatedRecipient);
        }
        let path = std::str::from_utf8(&b[..len]).map_err(|_| EnvelopeError::RecipientNotUtf8)?;
        define = Some(path);
        b.advance(len);
    }
    let mut reply = None;
    if flags & ENV_REPLY != 0 {
        if b.len() < 2 {
            return Err(EnvelopeError::TruncatedReply);
        }
        let len = usize::from(b.get_u16_le());
        if b.len() < len {
            return Err(EnvelopeError::TruncatedReply);
        }
        reply = Some(std::str::from_utf8(&b[..len]).map_err(|_| EnvelopeError::ReplyNotUtf8)?);
        b.advance(len);
    }
    if b.len() < 4 {
        return Err(EnvelopeError::NoManifest);
    }
    let manifest = b.get_u32_le();
    let kind = if flags & (ENV_FRAGMENT | ENV_STOP | ENV_RUN) == 0 {
        Kind::Message
    } else if flags == ENV_RUN {
        Kind::Run
    } else {
        special(flags, &mut b)?
    };
    let ext = CHECKED && flags & ENV_EXT != 0;
    Ok(Envelope {
        id,
        define,
        inline,
        reply,
        manifest,
        ext,
        kind,
        payload: b,
    })
}

/// The kind of an envelope with `ENV_FRAGMENT` or `ENV_STOP`, reading a
/// fragment's header from `b`.
#[cold]
fn special(flags: u8, b: &mut &[u8]) -> Result<Kind, EnvelopeError> {
    if flags & ENV_RUN != 0 {
        return Err(EnvelopeError::RunWithFlags);
    }
    if flags & ENV_STOP != 0 {
        if flags & ENV_FRAGMENT != 0 || !b.is_empty() {
            return Err(EnvelopeError::StopWithPayload);
        }
        return Ok(Kind::Stop);
    }
    if b.len() < FRAGMENT_HEADER {
        return Err(EnvelopeError::TruncatedFragment);
    }
    Ok(Kind::Fragment(Fragment {
        msg: b.get_u32_le(),
        total: b.get_u32_le(),
        offset: b.get_u32_le(),
    }))
}

/// Appends the header of an envelope to a recipient whose id the link
/// already knows, in one append: flags 0, id, manifest. The hot path.
#[inline(always)]
pub(crate) fn put_compact_header(b: &mut BytesMut, id: u32, manifest: u32) {
    let mut head = [0u8; ENV_HEADER];
    head[1..5].copy_from_slice(&id.to_le_bytes());
    head[5..9].copy_from_slice(&manifest.to_le_bytes());
    b.extend_from_slice(&head);
}

/// Appends the header of a run envelope (flags [`ENV_RUN`], id, manifest)
/// and its first record's length field, zero, in one append: the record
/// follows, and its length is written over the zero once known.
#[inline(always)]
pub(crate) fn put_run_header(b: &mut BytesMut, id: u32, manifest: u32) {
    let mut head = [0u8; ENV_HEADER + 4];
    head[0] = ENV_RUN;
    head[1..5].copy_from_slice(&id.to_le_bytes());
    head[5..9].copy_from_slice(&manifest.to_le_bytes());
    b.extend_from_slice(&head);
}

/// The messages an envelope this node wrote carries: a run envelope's
/// records, else one (`transport::TransportConfig::set_message_count`, so
/// that what a lost link drops is counted in messages).
pub(crate) fn messages_in(body: &[u8]) -> u64 {
    if body.first() != Some(&ENV_RUN) {
        return 1;
    }
    // The records are in the mailbox's form.
    let records = body.get(ENV_HEADER..).unwrap_or_default();
    crate::mailbox::count_records(records).max(1) as u64
}

/// As [`put_compact_header`], for a message that begins with an
/// extension block (flags `ENV_EXT`).
#[inline]
pub(crate) fn put_compact_header_ext(b: &mut BytesMut, id: u32, manifest: u32) {
    let start = b.len();
    put_compact_header(b, id, manifest);
    b[start] = ENV_EXT;
}

/// [`put_compact_header`] or [`put_compact_header_ext`], as `tag` says.
pub(crate) fn put_compact_tag(b: &mut BytesMut, id: u32, tag: Tag) {
    if tag.ext {
        put_compact_header_ext(b, id, tag.manifest);
    } else {
        put_compact_header(b, id, tag.manifest);
    }
}

/// How an envelope names its recipient.
#[derive(Debug, Clone, Copy)]
pub(crate) enum To<'a> {
    /// By an id the link defined before.
    Id(u32),
    /// By a new id, defined here with the path.
    Define(u32, &'a str),
    /// By its path, for this envelope only.
    Inline(&'a str),
}

/// Appends an envelope header in its general form: `to` the recipient,
/// `fragment` the fragment header of a large message's piece. The payload
/// follows.
pub(crate) fn put_header(b: &mut BytesMut, to: To<'_>, tag: Tag, fragment: Option<Fragment>) {
    put_header_reply(b, to, tag, fragment, None);
}

/// As [`put_header`], for an ask's request: `reply` is the path of its
/// reply slot (`ENV_REPLY`).
pub(crate) fn put_header_reply(
    b: &mut BytesMut,
    to: To<'_>,
    tag: Tag,
    fragment: Option<Fragment>,
    reply: Option<&str>,
) {
    let (id, define, mut flags) = match to {
        To::Id(id) => (id, None, 0),
        To::Define(id, path) => (id, Some(path), ENV_DEFINE),
        To::Inline(path) => (0, Some(path), ENV_INLINE),
    };
    if fragment.is_some() {
        flags |= ENV_FRAGMENT;
    }
    if reply.is_some() {
        flags |= ENV_REPLY;
    }
    flags |= tag.flags();
    b.put_u8(flags);
    b.put_u32_le(id);
    for path in [define, reply].into_iter().flatten() {
        let path = path.as_bytes();
        // Paths are bounded where they are parsed or made (`MAX_PATH_LEN`,
        // `MAX_NAME_LEN`), well inside what the field carries.
        debug_assert!(path.len() <= crate::path::MAX_PATH_LEN);
        b.put_u16_le(u16::try_from(path.len()).unwrap_or(u16::MAX));
        b.put_slice(&path[..path.len().min(usize::from(u16::MAX))]);
    }
    b.put_u32_le(tag.manifest);
    if let Some(f) = fragment {
        b.put_u32_le(f.msg);
        b.put_u32_le(f.total);
        b.put_u32_le(f.offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(id: u32, define: Option<&str>, manifest: u32, f: Option<Fragment>) -> BytesMut {
        let mut b = BytesMut::new();
        let to = match define {
            Some(p) => To::Define(id, p),
            None => To::Id(id),
        };
        put_header(&mut b, to, Tag::plain(manifest), f);
        b.extend_from_slice(b"payload");
        b
    }

    #[test]
    fn every_form_round_trips() {
        let f = Fragment {
            msg: 7,
            total: 1 << 20,
            offset: 65536,
        };
        for (define, fragment) in [
            (None, None),
            (Some("/user/a"), None),
            (None, Some(f)),
            (Some("/user/b"), Some(f)),
        ] {
            let b = encode(42, define, 0xdead_beef, fragment);
            let env = parse(&b).unwrap();
            assert_eq!(
                env,
                Envelope {
                    id: 42,
                    define,
                    inline: false,
                    reply: None,
                    manifest: 0xdead_beef,
                    ext: false,
                    kind: fragment.map_or(Kind::Message, Kind::Fragment),
                    payload: b"payload",
                }
            );
        }
    }

    #[test]
    fn an_asks_reply_path_rides_after_the_recipient() {
        for to in [To::Id(3), To::Define(3, "/user/a"), To::Inline("/user/b")] {
            let mut b = BytesMut::new();
            put_header_reply(&mut b, to, Tag::plain(9), None, Some("/temp/$1f"));
            b.extend_from_slice(b"q");
            let env = parse(&b).unwrap();
            assert_eq!(env.reply, Some("/temp/$1f"));
            assert_eq!((env.manifest, env.payload), (9, &b"q"[..]));
            // Cut anywhere in the header: an error, never a wrong reply.
            for cut in 1..b.len() - 1 {
                if let Ok(e) = parse(&b[..cut]) {
                    assert_eq!(e.reply, Some("/temp/$1f"), "cut {cut}");
                }
            }
        }
    }

    #[test]
    fn the_compact_header_is_the_general_one_without_flags() {
        let mut compact = BytesMut::new();
        put_compact_header(&mut compact, 9, 0x0102_0304);
        let mut general = BytesMut::new();
        put_header(&mut general, To::Id(9), Tag::plain(0x0102_0304), None);
        assert_eq!(compact, general);
        assert_eq!(compact.len(), ENV_HEADER);
        let ext = Tag {
            manifest: 5,
            ext: true,
        };
        let (mut compact, mut general) = (BytesMut::new(), BytesMut::new());
        put_compact_tag(&mut compact, 9, ext);
        put_header(&mut general, To::Id(9), ext, None);
        assert_eq!(compact, general);
        assert_eq!(compact[0], ENV_EXT);
    }

    #[test]
    fn an_inline_recipient_is_named_by_its_path_alone() {
        let mut b = BytesMut::new();
        put_header(&mut b, To::Inline("/temp/$00ab"), Tag::plain(7), None);
        b.extend_from_slice(b"x");
        let env = parse(&b).unwrap();
        assert!(env.inline);
        assert_eq!(env.define, Some("/temp/$00ab"));
        assert_eq!((env.id, env.manifest, env.payload), (0, 7, &b"x"[..]));
        assert_eq!(b.len() - 1, overhead("/temp/$00ab".len()));
    }

    #[test]
    fn the_overhead_bounds_every_header_without_a_fragment() {
        let b = encode(1, Some("/user/some-actor"), 3, None);
        assert_eq!(
            b.len() - b"payload".len(),
            overhead("/user/some-actor".len())
        );
    }

    #[test]
    fn every_truncation_is_an_error_or_a_shorter_payload() {
        let f = Fragment {
            msg: 1,
            total: 10,
            offset: 0,
        };
        let full = encode(5, Some("/user/x"), 77, Some(f));
        let header = full.len() - b"payload".len();
        for cut in 0..full.len() {
            match parse(&full[..cut]) {
                Err(_) => assert!(cut < header, "cut at {cut} must parse"),
                Ok(env) => {
                    assert!(cut >= header, "cut at {cut} must not parse");
                    assert_eq!(env.payload, &b"payload"[..cut - header]);
                }
            }
        }
    }

    #[test]
    fn a_stop_is_an_empty_envelope_with_its_flag() {
        for to in [To::Id(3), To::Define(3, "/user/a")] {
            let mut b = BytesMut::new();
            put_header(&mut b, to, Tag::plain(9), None);
            b[0] |= ENV_STOP;
            let env = parse(&b).unwrap();
            assert_eq!(env.kind, Kind::Stop);
            assert_eq!((env.id, env.manifest, env.payload), (3, 9, &b""[..]));
            // A payload, or a fragment header, makes it malformed.
            let mut with_payload = b.clone();
            with_payload.extend_from_slice(b"x");
            assert_eq!(parse(&with_payload), Err(EnvelopeError::StopWithPayload));
            b[0] |= ENV_FRAGMENT;
            b.extend_from_slice(&[0; FRAGMENT_HEADER]);
            assert_eq!(parse(&b), Err(EnvelopeError::StopWithPayload));
        }
        // A message is not a stop.
        assert_eq!(
            parse(&encode(1, None, 2, None)).unwrap().kind,
            Kind::Message
        );
    }

    #[test]
    fn malformed_input_is_named() {
        assert_eq!(parse(&[0; 4]), Err(EnvelopeError::Short));
        assert_eq!(
            parse(&[ENV_DEFINE, 1, 0, 0, 0, 5, 0, b'a']),
            Err(EnvelopeError::TruncatedRecipient)
        );
        assert_eq!(
            parse(&[ENV_DEFINE, 1, 0, 0, 0, 1, 0, 0xff, 0, 0, 0, 0]),
            Err(EnvelopeError::RecipientNotUtf8)
        );
        assert_eq!(parse(&[0, 1, 0, 0, 0, 1]), Err(EnvelopeError::NoManifest));
        assert_eq!(
            parse(&[ENV_FRAGMENT, 1, 0, 0, 0, 1, 0, 0, 0, 1]),
            Err(EnvelopeError::TruncatedFragment)
        );
        for unknown in [128, 128 | ENV_RUN] {
            assert_eq!(
                parse(&[unknown, 1, 0, 0, 0, 1, 0, 0, 0]),
                Err(EnvelopeError::UnknownFlags)
            );
        }
        // A block that does not parse, in a whole message.
        let head = [ENV_EXT, 1, 0, 0, 0, 1, 0, 0, 0];
        for (block, why) in [
            (&[][..], "truncated extension block"),
            (&[4], "unknown bits in the extension block"),
            (&[1], "truncated extension block"),
            (&[2, 1, 1], "truncated extension block"),
        ] {
            assert_eq!(
                parse(&[&head[..], block].concat()),
                Err(EnvelopeError::ExtensionBlock(why)),
                "{block:?}"
            );
        }
        let zero_trace = [&head[..], &[2], &[0; 25]].concat();
        assert_eq!(
            parse(&zero_trace),
            Err(EnvelopeError::ExtensionBlock(
                "invalid trace context (an all-zero id)"
            ))
        );
        // What a malformed envelope is counted as, and its text.
        assert_eq!(EnvelopeError::Short.kind(), MalformedKind::Envelope);
        assert_eq!(
            EnvelopeError::ExtensionBlock("truncated extension block").kind(),
            MalformedKind::ExtensionBlock
        );
        assert_eq!(
            EnvelopeError::UnknownFlags.to_string(),
            "unknown envelope flags (a newer node's feature?)"
        );
        assert_eq!(EnvelopeError::UnknownFlags.label(), "unknown_flags");
    }

    #[test]
    fn a_run_envelope_carries_its_records_and_takes_no_other_flag() {
        let mut b = BytesMut::new();
        put_run_header(&mut b, 9, 0x0102_0304);
        b[ENV_HEADER] = 1;
        b.extend_from_slice(b"x");
        let env = parse(&b).unwrap();
        assert_eq!(
            (env.id, env.manifest, env.kind),
            (9, 0x0102_0304, Kind::Run)
        );
        assert_eq!((env.define, env.reply, env.ext), (None, None, false));
        assert_eq!(env.payload, &[1, 0, 0, 0, b'x']);
        for other in [
            ENV_DEFINE,
            ENV_FRAGMENT,
            ENV_INLINE,
            ENV_REPLY,
            ENV_STOP,
            ENV_EXT,
        ] {
            let mut with = b.clone();
            with[0] |= other;
            assert!(parse(&with).is_err(), "run with flag {other}");
        }
        for cut in 0..ENV_HEADER {
            assert!(parse(&b[..cut]).is_err(), "cut {cut}");
        }
        // A lost frame counts its records.
        assert_eq!(messages_in(&b), 1);
        b.extend_from_slice(&[0, 0, 0, 0, 2, 0, 0, 0, b'y', b'z']);
        assert_eq!(messages_in(&b), 3);
        assert_eq!(messages_in(&encode(1, None, 2, None)), 1);
    }

    #[test]
    fn the_extension_block_rides_before_the_message() {
        use crate::{
            serialization::{Ext, SerializerId},
            trace::TraceContext,
        };
        let trace = TraceContext::new([7; 16], [8; 8], 1).unwrap();
        for ext in [
            Ext {
                serializer: SerializerId::MSGPACK,
                trace: None,
            },
            Ext {
                serializer: SerializerId::BINCODE,
                trace: Some(trace),
            },
            Ext {
                serializer: SerializerId::custom(200),
                trace: Some(trace),
            },
        ] {
            let mut b = BytesMut::new();
            let tag = Tag {
                manifest: 3,
                ext: true,
            };
            put_header(&mut b, To::Define(4, "/user/a"), tag, None);
            ext.put(&mut b);
            b.extend_from_slice(b"msg");
            let env = parse(&b).unwrap();
            assert!(env.ext);
            assert_eq!(Ext::parse(env.payload), Ok((ext, &b"msg"[..])));
            // Cut anywhere before the message: an error.
            for cut in 0..b.len() - 3 {
                assert!(parse(&b[..cut]).is_err(), "cut {cut}");
            }
        }
        // An empty block writes nothing.
        let mut b = BytesMut::new();
        Ext::for_send(SerializerId::BINCODE, false).put(&mut b);
        assert!(b.is_empty());
    }
}
