//! An [`ActorRef`] inside a message: serialized as its path and the
//! manifest id of the type it takes (`path#xxxxxxxx`), so that a receiver
//! that decodes it as a ref to another type finds out; decoded against the
//! node of the decode scope (`serialization::with_decode_scope`). A ref
//! is a remote message itself, so an ask can be answered with one.

use std::{
    fmt,
    marker::PhantomData,
    sync::{Arc, atomic::Ordering},
};

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

use super::{ActorRef, Inner};
use crate::{
    node::Node,
    path::ActorPath,
    registry::Target,
    serialization::{RemoteMessage, decoding_node, manifest_id, manifests},
};

impl<M: RemoteMessage> Serialize for ActorRef<M> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // A local actor whose ref leaves the process must be reachable by
        // its path from now on.
        match &self.inner {
            Inner::Local(c) => c.register_remote(),
            Inner::Promise(p) => {
                let p = &p.0;
                if !p.registered.swap(true, Ordering::AcqRel)
                    && let Some(registry) = p.registry.upgrade()
                {
                    // So that a reply this node no longer waits for is
                    // named by its type in the dead letters.
                    let _ = manifests::register::<M>();
                    let target: Arc<dyn Target> = p.clone();
                    registry.register(p.path.elements(), target);
                }
            }
            Inner::Remote(r) | Inner::RemoteExt(r) => {
                if let Some(reply) = &r.reply {
                    reply.forwarded.store(true, Ordering::Release);
                }
            }
            Inner::Dead(..) => {}
        }
        // The path, and the type the ref takes, so a receiver that decodes
        // it as a ref to another type finds out here (`#` is in no path).
        s.collect_str(&format_args!(
            "{}#{:08x}",
            self.path(),
            manifest_id(M::MANIFEST)
        ))
    }
}

impl<'de, M: RemoteMessage> Deserialize<'de> for ActorRef<M> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<M>(PhantomData<fn() -> M>);
        impl<M: RemoteMessage> de::Visitor<'_> for V<M> {
            type Value = ActorRef<M>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an actor path")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ActorRef<M>, E> {
                let (v, takes) = match v.rsplit_once('#') {
                    Some((path, m)) => {
                        let m = u32::from_str_radix(m, 16)
                            .map_err(|_| E::custom("an actor ref's type is not a manifest id"))?;
                        (path, Some(m))
                    }
                    None => (v, None),
                };
                if let Some(m) = takes
                    && m != manifest_id(M::MANIFEST)
                {
                    return Err(E::custom(format_args!(
                        "a ref to an actor that takes {}, decoded as a ref taking {}",
                        manifests::label(m),
                        M::MANIFEST
                    )));
                }
                let path = ActorPath::parse(v).map_err(E::custom)?;
                let node = decoding_node()
                    .and_then(|n| n.downcast::<Node>().ok())
                    .ok_or_else(|| {
                        E::custom("an ActorRef can only be deserialized by an actor system")
                    })?;
                ActorRef::for_path(&node, path)
                    .map(ActorRef::watching_reply)
                    .map_err(E::custom)
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// A ref is itself a remote message (its path and type), so an ask can be
/// answered with one: "which worker handles this key?".
impl<M: RemoteMessage> RemoteMessage for ActorRef<M> {
    const MANIFEST: &'static str =
        crate::serialization::ManifestBuf::concat(&["actors.ActorRef<", M::MANIFEST, ">"]).as_str();
}
