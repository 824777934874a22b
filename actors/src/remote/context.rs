//! What every association of a node shares: the endpoint it dials on, the
//! local registry it delivers into, its settings, where events go, and the
//! token that stops its tasks.

use std::sync::Arc;

use tokio::sync::{Semaphore, broadcast};
use tokio_util::sync::CancellationToken;

use super::{events::RemoteEvent, net::Net};
use crate::budget::NodeBudget;
use crate::{config::SystemConfig, registry::Registry};

pub(crate) struct Context {
    pub(super) registry: Arc<Registry>,
    pub(super) config: SystemConfig,
    pub(super) events: broadcast::Sender<RemoteEvent>,
    pub(super) endpoint: Box<dyn Net>,
    /// Stops the keeper task (heartbeat ticks) and the large-message lanes.
    pub(super) cancel: CancellationToken,
    /// Connection attempts in flight (`SystemConfig::set_max_concurrent_dials`).
    pub(super) dials: Semaphore,
    /// What peers make this node hold (`SystemConfig::set_peer_memory_budget`).
    pub(super) budget: Arc<NodeBudget>,
}
