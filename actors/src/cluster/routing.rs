//! Cluster-wide groups as users see them: [`Cluster`]'s group calls
//! (join, leave, list, subscribe), the listing of a group's refs over the
//! members that are up, and group routers that follow a group
//! ([`RouterBuilder::cluster_group`]). The table they read is
//! `groups`; the membership task disseminates it.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::sync::{broadcast, oneshot};

use super::{
    Cluster, ClusterError, GroupEvent, MemberState, lock,
    shared::{Cmd, Shared},
};
use crate::{
    actor_ref::ActorRef,
    bincode_format,
    path::ActorPath,
    router::{Router, RouterBuilder},
    serialization::{RemoteMessage, manifest_id},
    system::ActorSystem,
};

impl Cluster {
    /// Puts local actor `actor` in group `group`, for every member to find
    /// ([`group`](Self::group)). It leaves the group when it stops, or with
    /// [`leave_group`](Self::leave_group). A member's entries of one group
    /// travel in one membership packet, so a node holds about a dozen actors
    /// per group (more with
    /// [`ClusterConfig::set_max_packet_size`](super::ClusterConfig::set_max_packet_size)).
    ///
    /// # Errors
    /// [`ClusterError::NotLocal`], [`ClusterError::GroupTooLarge`],
    /// [`ClusterError::Stopped`].
    pub async fn join_group<M: RemoteMessage>(
        &self,
        group: &str,
        actor: &ActorRef<M>,
    ) -> Result<(), ClusterError> {
        let entry = self.entry(actor)?;
        self.change_group(group, entry.clone(), true).await?;
        // Leaves when the actor stops; does not keep membership running.
        let cmds = self.cmds.downgrade();
        let watch = actor.watch();
        let group = group.to_owned();
        tokio::spawn(async move {
            watch.await;
            if let Some(cmds) = cmds.upgrade() {
                let _ = cmds.send(Cmd::Group {
                    group,
                    entry,
                    join: false,
                    done: None,
                });
            }
        });
        Ok(())
    }

    /// Takes local actor `actor` out of group `group`.
    ///
    /// # Errors
    /// [`ClusterError::NotLocal`], [`ClusterError::Stopped`].
    pub async fn leave_group<M: RemoteMessage>(
        &self,
        group: &str,
        actor: &ActorRef<M>,
    ) -> Result<(), ClusterError> {
        let entry = self.entry(actor)?;
        self.change_group(group, entry, false).await
    }

    /// Asks the membership task to add (`join`) or remove `entry` in
    /// `group`, and waits for its answer.
    async fn change_group(
        &self,
        group: &str,
        entry: String,
        join: bool,
    ) -> Result<(), ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Group {
                group: group.to_owned(),
                entry,
                join,
                done: Some(tx),
            })
            .map_err(|_| ClusterError::Stopped)?;
        rx.await.map_err(|_| ClusterError::Stopped)?
    }

    /// A ref's group entry: its path and the type it takes, as a ref
    /// inside a message is (serializing it also makes a local actor
    /// reachable by path).
    fn entry<M: RemoteMessage>(&self, actor: &ActorRef<M>) -> Result<String, ClusterError> {
        if !actor.is_local() || actor.path().node() != self.shared.me.node {
            return Err(ClusterError::NotLocal(actor.path().to_string()));
        }
        let mut buf = BytesMut::new();
        bincode_format::to_buf(actor, &mut buf, usize::MAX)
            .and_then(|()| bincode_format::from_slice::<String>(&buf).map(|(s, _)| s))
            .map_err(|e| ClusterError::NotLocal(e.to_string()))
    }

    /// The refs in group `group`, over every member this node sees (and
    /// this one), that take `M`; entries of another type are skipped.
    pub fn group<M: RemoteMessage>(&self, group: &str) -> Vec<ActorRef<M>> {
        self.shared.group(group)
    }

    /// The groups with entries anywhere in the cluster.
    pub fn groups(&self) -> Vec<String> {
        lock(&self.shared.groups).groups()
    }

    /// Group changes from now on (which group; [`group`](Self::group)
    /// lists it). Lags like [`subscribe`](Self::subscribe).
    pub fn subscribe_groups(&self) -> broadcast::Receiver<GroupEvent> {
        self.shared.group_events.subscribe()
    }
}

impl Shared {
    /// [`Cluster::group`]: the entries of this node and of the members
    /// that are up, each at the incarnation this node holds up.
    fn group<M: RemoteMessage>(&self, group: &str) -> Vec<ActorRef<M>> {
        let suffix = format!("#{:08x}", manifest_id(M::MANIFEST));
        let entries = lock(&self.groups).refs(group);
        let view = lock(&self.view);
        let live = |node: &str, uid: u64| {
            (node == self.me.node && uid == self.me.uid)
                || view
                    .members
                    .get(node)
                    .is_some_and(|m| m.uid == uid && m.state == MemberState::Up)
        };
        let entries: Vec<(u64, String)> = entries
            .into_iter()
            .filter(|(uid, e)| {
                ActorPath::parse(e.rsplit_once('#').map_or(e.as_str(), |(p, _)| p))
                    .is_ok_and(|p| live(p.node(), *uid))
            })
            .collect();
        drop(view);
        entries
            .iter()
            .filter_map(|(uid, e)| Some((*uid, e.strip_suffix(&suffix)?)))
            .filter_map(|(uid, p)| Some((uid, ActorPath::parse(p).ok()?)))
            .filter_map(|(uid, p)| ActorRef::for_path_at(&self.node, p, uid).ok())
            .collect()
    }
}

impl<M: RemoteMessage> RouterBuilder<M> {
    /// A group router whose routees follow cluster group `group` (the
    /// refs that take `M`): it starts with the group's refs, adds those
    /// that join, and removes those that leave, stop, or whose member
    /// goes down or leaves the cluster, as `cluster` learns of it
    /// ([`Cluster::subscribe_groups`] and [`Cluster::subscribe`]). A
    /// routee names its member's incarnation: when a member restarts, the
    /// old incarnation's routees are replaced by the new one's as soon as
    /// the new one's entries arrive. A background task follows the group
    /// until the router stops; it does not keep membership running (when
    /// membership stops, the routees stay as they were). Routees added or
    /// removed by hand are put back in line with the group at its next
    /// change.
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn cluster_group(self, system: &ActorSystem, cluster: &Cluster, group: &str) -> Router<M> {
        // Subscribed before the first listing: no change falls between.
        let mut events = cluster.shared.group_events.subscribe();
        let mut members = cluster.shared.events.subscribe();
        let shared = Arc::downgrade(&cluster.shared);
        let router = self.group(system, cluster.shared.group::<M>(group));
        let stopped = router.actor_ref().watch();
        let follower = router.clone();
        let group = group.to_owned();
        tokio::spawn(async move {
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    ev = events.recv() => match ev {
                        Ok(e) if e.group != group => continue,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    // A member's change (a restart, say) re-syncs too.
                    ev = members.recv() => match ev {
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let want = shared.group::<M>(&group);
                drop(shared);
                if follow(&follower, want).await.is_err() {
                    // The router stopped.
                    return;
                }
            }
        });
        router
    }
}

/// Makes `router`'s routees `want`: removes those not wanted, then adds
/// the missing. A routee is the same only at the same path *and*
/// incarnation: a restarted member's ref replaces the old one (removed
/// first, since the router keeps one routee per path).
async fn follow<M: RemoteMessage>(
    router: &Router<M>,
    want: Vec<ActorRef<M>>,
) -> Result<(), crate::error::AskError> {
    let same = |a: &ActorRef<M>, b: &ActorRef<M>| {
        a.path() == b.path() && a.incarnation() == b.incarnation()
    };
    let have = router.routees();
    for h in &have {
        if !want.iter().any(|r| same(r, h)) {
            router.remove_routee(h.path()).await?;
        }
    }
    let have = router.routees();
    for r in &want {
        if !have.iter().any(|h| same(h, r)) {
            router.add_routee(r.clone()).await?;
        }
    }
    Ok(())
}
