//! [`RouterMsg`]: what the router actor takes. Only `Route` crosses
//! nodes; `Add` and `Remove` are local.

use std::fmt;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{actor_ref::ActorRef, path::ActorPath, serialization::RemoteMessage};

/// What the router actor takes. Management messages carry an optional
/// reply ref that is told `true` if they changed the routee set.
///
/// For a message type `M` that is a [`RemoteMessage`], so is
/// `RouterMsg<M>` (manifest `actors.RouterMsg<` + `M`'s + `>`): a router
/// spawned at a name ([`RouterBuilder::group_named`],
/// [`RouterBuilder::pool_named`]) is resolved from another node as an
/// `ActorRef<RouterMsg<M>>`, and routes the [`Route`](Self::Route)
/// messages it gets from there. Only `Route` crosses nodes: `Add` and
/// `Remove` are local (a remote send of one fails to encode), so peers
/// cannot change, or stop, the routees.
///
/// [`RouterBuilder::group_named`]: crate::RouterBuilder::group_named
/// [`RouterBuilder::pool_named`]: crate::RouterBuilder::pool_named
#[derive(Serialize, Deserialize)]
#[serde(bound(serialize = "M: Serialize", deserialize = "M: DeserializeOwned"))]
#[non_exhaustive]
pub enum RouterMsg<M> {
    /// Route this message (one more hop than [`Router::tell`]; see
    /// [where routing runs](crate::router#where-routing-runs-in-the-caller-with-no-extra-hop)).
    ///
    /// [`Router::tell`]: crate::Router::tell
    Route(M),
    /// Add a routee (a group member: watched, never replaced or stopped by
    /// the router). Adding one that is already a routee changes nothing.
    /// Local only.
    #[serde(skip)]
    Add(ActorRef<M>, Option<ActorRef<bool>>),
    /// Remove the routee at this path; a pool routee is also stopped.
    /// Local only.
    #[serde(skip)]
    Remove(ActorPath, Option<ActorRef<bool>>),
}

/// Only [`RouterMsg::Route`] is encoded; its payload is `M`'s encoding
/// behind bincode's variant index.
impl<M: RemoteMessage> RemoteMessage for RouterMsg<M> {
    const MANIFEST: &'static str =
        crate::serialization::ManifestBuf::concat(&["actors.RouterMsg<", M::MANIFEST, ">"])
            .as_str();
}

impl<M> fmt::Debug for RouterMsg<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Route(_) => f.write_str("Route(..)"),
            Self::Add(r, _) => write!(f, "Add({})", r.path()),
            Self::Remove(p, _) => write!(f, "Remove({p})"),
        }
    }
}
