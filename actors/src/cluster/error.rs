//! [`ClusterError`]: why a node could not join, or a membership call
//! failed.

use std::{net::SocketAddr, time::Duration};

/// Why a node could not join.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The system has no remoting (`ActorSystem::local`).
    #[error("the actor system has no remoting")]
    NoRemoting,
    /// The node has no shared secret: membership packets could not be
    /// authenticated.
    #[error("membership needs a shared secret (SystemConfig transport shared secret or cookie)")]
    NoSecret,
    /// Membership is bound to a wildcard address and there is no address to
    /// advertise: remoting's advertised host is a wildcard too, or does not
    /// resolve. Set
    /// [`ClusterConfig::set_udp_advertise`](super::ClusterConfig::set_udp_advertise)
    /// (or give remoting an advertised address).
    #[error(
        "membership is bound to the wildcard address {0} and has no address to advertise to peers: \
         set ClusterConfig::set_udp_advertise (or an advertised address for remoting)"
    )]
    Wildcard(SocketAddr),
    /// No seed answered within the time
    /// [`Cluster::joined`](super::Cluster::joined) was given: the seeds are
    /// down or unreachable, or they do not share this node's secret (their
    /// refusals are logged on their side with this node's address).
    #[error(
        "no seed answered within {waited:?} (seeds {seeds:?}): are they up, reachable over UDP, \
         and do they share this node's secret?"
    )]
    NoSeedAnswered {
        /// The seeds this node contacts.
        seeds: Vec<String>,
        /// How long it waited.
        waited: Duration,
    },
    /// An argument a setting's rules refuse (a seed given to
    /// [`Cluster::rejoin`](super::Cluster::rejoin) that is not `host:port`, as
    /// [`ClusterConfig::set_seeds`](super::ClusterConfig::set_seeds) refuses
    /// it).
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    /// A seed address does not resolve.
    #[error("seed {0:?} does not resolve: {1}")]
    Seed(String, std::io::Error),
    /// The UDP socket could not be bound.
    #[error("cannot bind membership socket {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// This node already left, or its system shut down.
    #[error("membership has stopped")]
    Stopped,
    /// Only this node's own actors can join its groups.
    #[error("only a local actor can join a group: {0}")]
    NotLocal(String),
    /// This node's entries of one group must fit one membership packet.
    #[error(
        "group {group:?}: this node's entries no longer fit one packet ({size} bytes, at most {limit})"
    )]
    GroupTooLarge {
        /// The group.
        group: String,
        /// Its entries' encoded size.
        size: usize,
        /// The most that fits.
        limit: usize,
    },
}
