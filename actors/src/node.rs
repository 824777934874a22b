//! This node as refs see it: the registry of local targets and, with
//! remoting, the links to other nodes. An `ActorRef` that arrives inside a
//! message is resolved against it.

use std::sync::Arc;

use crate::{registry::Registry, remote::Remoting};

/// One node: what is local, and how to reach what is not.
pub(crate) struct Node {
    pub(crate) registry: Arc<Registry>,
    pub(crate) remoting: Option<Arc<Remoting>>,
}

impl Node {
    /// The node, registered with its registry as the scope that decodes
    /// of messages for its actors resolve refs against.
    pub(crate) fn new(registry: Arc<Registry>, remoting: Option<Arc<Remoting>>) -> Arc<Self> {
        let node = Arc::new(Self { registry, remoting });
        let weak: std::sync::Weak<dyn std::any::Any + Send + Sync> = Arc::downgrade(&node) as _;
        node.registry.set_decode_scope(weak);
        node
    }
}
