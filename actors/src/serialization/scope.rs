//! The decode scope: what decoding a remote message can see besides its
//! bytes (the frame it arrived in, the node it arrived at), installed
//! around a batch's decode by [`with_decode_scope`], and [`SharedBytes`],
//! the byte string that reads it to share the frame instead of copying.

use std::{any::Any, cell::RefCell, fmt, ops::Deref, sync::Arc};

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};

/// What decoding a remote message can see besides its bytes: the frame
/// that [`SharedBytes`] fields slice instead of copying, and the node that
/// `ActorRef` fields are resolved against.
///
/// serde's `Deserialize` takes no context, so this one value is what the
/// two places that decode user messages (an actor's task decoding a batch,
/// an ask's reply slot) install around their decode with
/// [`with_decode_scope`], and what those two `Deserialize` impls read. It
/// is set for exactly the duration of that call and restored after, even
/// on a panic; outside it both fields are empty (a `SharedBytes` then
/// copies, an `ActorRef` fails to decode). The node is type-erased here
/// because serialization sits below the runtime; `ActorRef` downcasts it.
struct DecodeScope {
    frame: Option<Bytes>,
    node: Option<Arc<dyn Any + Send + Sync>>,
}

thread_local! {
    static DECODE_SCOPE: RefCell<DecodeScope> = const {
        RefCell::new(DecodeScope { frame: None, node: None })
    };
}

/// Runs `f` (which decodes records of `frame`, with no await in between)
/// with `frame` and `node` as the decode scope, then restores the previous
/// scope. Costs two reference-count updates per call, so callers install it
/// once per batch, not once per message.
pub(crate) fn with_decode_scope<T>(
    node: &Arc<dyn Any + Send + Sync>,
    frame: &Bytes,
    f: impl FnOnce() -> T,
) -> T {
    struct Restore(Option<DecodeScope>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(prev) = self.0.take() {
                DECODE_SCOPE.with(|s| *s.borrow_mut() = prev);
            }
        }
    }
    let prev = DECODE_SCOPE.with(|s| {
        std::mem::replace(
            &mut *s.borrow_mut(),
            DecodeScope {
                frame: Some(frame.clone()),
                node: Some(node.clone()),
            },
        )
    });
    let _restore = Restore(Some(prev));
    f()
}

/// The node of the decode scope, if a decode is under way.
pub(crate) fn decoding_node() -> Option<Arc<dyn Any + Send + Sync>> {
    DECODE_SCOPE.with(|s| s.borrow().node.clone())
}

/// A byte string that, when decoded from a remote message, shares the
/// received frame's memory instead of copying it (like Netty's retained
/// slices). Serializes exactly like `Vec<u8>` / `serde_bytes`.
///
/// The frame's buffer stays allocated while any `SharedBytes` of it lives,
/// so copy out (`to_vec`) what you keep for long.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedBytes(pub Bytes);

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.0.len())
    }
}

impl Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Bytes> for SharedBytes {
    fn from(b: Bytes) -> Self {
        Self(b)
    }
}

impl From<Vec<u8>> for SharedBytes {
    fn from(v: Vec<u8>) -> Self {
        Self(Bytes::from(v))
    }
}

impl Serialize for SharedBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SharedBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_borrowed_bytes<E: serde::de::Error>(
                self,
                v: &'de [u8],
            ) -> Result<SharedBytes, E> {
                let shared = DECODE_SCOPE.with(|s| {
                    let s = s.borrow();
                    let frame = s.frame.as_ref()?;
                    let (start, end) = (
                        frame.as_ptr() as usize,
                        frame.as_ptr() as usize + frame.len(),
                    );
                    let p = v.as_ptr() as usize;
                    // Only a slice inside the frame can be shared.
                    (p >= start && p + v.len() <= end).then(|| frame.slice_ref(v))
                });
                Ok(SharedBytes(
                    shared.unwrap_or_else(|| Bytes::copy_from_slice(v)),
                ))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<SharedBytes, E> {
                Ok(SharedBytes(Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<SharedBytes, E> {
                Ok(SharedBytes(Bytes::from(v)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SharedBytes, A::Error> {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = seq.next_element()? {
                    v.push(b);
                }
                Ok(SharedBytes(Bytes::from(v)))
            }
        }
        d.deserialize_bytes(V)
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::serialization::{Bincode, Serializer};

    #[test]
    fn shared_bytes_slice_the_frame() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct M(u8, SharedBytes);
        let mut b = BytesMut::new();
        Bincode
            .serialize(&M(1, SharedBytes::from(vec![9u8; 100])), &mut b)
            .unwrap();
        let frame = b.freeze();
        let node: Arc<dyn Any + Send + Sync> = Arc::new(());
        let m: M = with_decode_scope(&node, &frame, || Bincode.deserialize(&frame)).unwrap();
        assert_eq!(&m.1[..], &[9u8; 100][..]);
        let inside = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        assert!(
            inside.contains(&(m.1.as_ptr() as usize)),
            "shares the frame"
        );
        // Without a frame it copies.
        let m: M = Bincode.deserialize(&frame).unwrap();
        assert!(!inside.contains(&(m.1.as_ptr() as usize)));
    }

    #[test]
    fn the_scope_is_restored_after_nesting_and_panics() {
        let frame = Bytes::from_static(b"frame");
        let (a, b): (Arc<dyn Any + Send + Sync>, Arc<dyn Any + Send + Sync>) =
            (Arc::new(1u8), Arc::new(2u8));
        let is = |node: &Arc<dyn Any + Send + Sync>| {
            decoding_node().is_some_and(|n| Arc::ptr_eq(&n, node))
        };
        assert!(decoding_node().is_none(), "empty outside a decode");
        with_decode_scope(&a, &frame, || {
            assert!(is(&a));
            with_decode_scope(&b, &frame, || assert!(is(&b)));
            assert!(is(&a), "the outer scope is back after the inner one");
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                with_decode_scope(&b, &frame, || panic!("a Deserialize panicked"))
            }));
            assert!(unwound.is_err());
            assert!(is(&a), "and after a panic inside one");
        });
        assert!(decoding_node().is_none(), "empty again after the decode");
        // Only this scope's references were taken, and all were given back.
        assert_eq!(Arc::strong_count(&a), 1);
        assert_eq!(Arc::strong_count(&b), 1);
    }

    #[test]
    fn shared_bytes_decode_from_any_serde_shape() {
        use serde::de::{
            IntoDeserializer,
            value::{BytesDeserializer, Error, SeqDeserializer},
        };
        let d: BytesDeserializer<'_, Error> = BytesDeserializer::new(&[1, 2, 3]);
        assert_eq!(&SharedBytes::deserialize(d).unwrap()[..], &[1, 2, 3]);
        // A format that writes bytes as a sequence of numbers.
        let seq: SeqDeserializer<_, Error> = vec![4u8, 5].into_deserializer();
        assert_eq!(&SharedBytes::deserialize(seq).unwrap()[..], &[4, 5]);
        assert_eq!(
            format!("{:?}", SharedBytes::from(vec![0; 3])),
            "SharedBytes(3 bytes)"
        );
    }
}
