//! Message adapters (Akka typed's `messageAdapter`, ractor's derived
//! refs): an [`ActorRef<N>`] in front of an actor that takes `M`, turning
//! each `N` into an `M` with a function.
//!
//! An adapter is a small actor of its own (`/user/$N`), so its ref is an
//! ordinary local ref: it works in this process, and sent inside a message
//! to another node it is reachable there like any ref, the conversion
//! running here, at the origin. It forwards with `send`, so a full target
//! mailbox pushes back on the adapter's senders, and it watches its
//! target: when the target stops (or its node is lost), the adapter stops
//! too and what is sent to it becomes dead letters. Peers cannot create
//! adapters, only local code can; each costs one idle task and a mailbox
//! until its target stops, or until [`ActorRef::stop`] stops it.

use crate::{
    actor::{Actor, ActorResult, Ctx},
    actor_ref::ActorRef,
    error::SendError,
    lifecycle::Terminated,
    system::ActorSystem,
};

/// Converts each message and forwards it to `target`.
struct Adapter<N, M, F> {
    target: ActorRef<M>,
    convert: F,
    _takes: std::marker::PhantomData<fn(N)>,
}

impl<N, M, F> Actor for Adapter<N, M, F>
where
    N: Send + 'static,
    M: Send + 'static,
    F: Fn(N) -> M + Send + Sync + 'static,
{
    type Msg = N;

    async fn started(&mut self, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.watch(&self.target);
        Ok(())
    }

    async fn handle(&mut self, msg: N, ctx: &mut Ctx<Self>) -> ActorResult {
        match self.target.send((self.convert)(msg)).await {
            // The watch stops this adapter too; no need to wait for it.
            Err(SendError::ActorGone(_)) => ctx.stop(),
            // Dropped like a failed `tell`: the sender of an `N` never saw
            // the `M`, and a serialization error was logged as a dead
            // letter by the ref.
            Err(e) => {
                tracing::debug!(target_path = %self.target.path(), error = %e, "adapter could not forward");
            }
            Ok(()) => {}
        }
        Ok(())
    }

    async fn terminated(&mut self, _: Terminated, ctx: &mut Ctx<Self>) -> ActorResult {
        ctx.stop();
        Ok(())
    }
}

impl ActorSystem {
    /// A ref that takes `N`, turns each into an `M` with `convert` and
    /// forwards it to `target`: a narrower or other-shaped view of an
    /// actor, to hand to code or nodes that speak `N`. The adapter is a
    /// small actor of its own (`/user/$N`), so sent to another node its
    /// ref works there, converting here. It forwards with `send` (a full
    /// target pushes back on the adapter's senders) and stops when
    /// `target` stops or its node is lost; then what is sent to it is a
    /// dead letter. Stop it earlier with [`ActorRef::stop`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use actors::{Actor, ActorRef, ActorResult, ActorSystem, Ctx};
    /// enum Thermostat { Reading(f64), Report(ActorRef<f64>) }
    /// struct Avg(f64, u32);
    /// impl Actor for Avg {
    ///     type Msg = Thermostat;
    ///     async fn handle(&mut self, msg: Thermostat, _: &mut Ctx<Self>) -> ActorResult {
    ///         match msg {
    ///             Thermostat::Reading(t) => { self.0 += t; self.1 += 1; }
    ///             Thermostat::Report(r) => { let _ = r.tell(self.0 / f64::from(self.1)); }
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::local("doc").unwrap();
    /// let avg = system.spawn(Avg(0.0, 0));
    /// // A sensor knows only numbers.
    /// let sensor: ActorRef<f64> = system.adapter(&avg, Thermostat::Reading);
    /// sensor.tell(20.0).unwrap();
    /// sensor.tell(22.0).unwrap();
    /// // Two adapters are two senders: nothing orders the report behind
    /// // the readings, so ask until both readings have arrived.
    /// let report: ActorRef<ActorRef<f64>> = system.adapter(&avg, Thermostat::Report);
    /// let mut mean = f64::NAN;
    /// for _ in 0..1000 {
    ///     mean = report.ask(|r| r, Duration::from_secs(1)).await.unwrap();
    ///     if mean == 21.0 {
    ///         break;
    ///     }
    ///     tokio::task::yield_now().await;
    /// }
    /// assert_eq!(mean, 21.0);
    /// # }
    /// ```
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn adapter<N, M, F>(&self, target: &ActorRef<M>, convert: F) -> ActorRef<N>
    where
        N: Send + 'static,
        M: Send + 'static,
        F: Fn(N) -> M + Send + Sync + 'static,
    {
        self.spawn(Adapter {
            target: target.clone(),
            convert,
            _takes: std::marker::PhantomData,
        })
    }
}

impl<A: Actor> Ctx<A> {
    /// An adapter to this actor (Akka's `context.messageAdapter`): a ref
    /// taking `N` that delivers `convert(n)` here, for a reply or a
    /// subscription in another protocol's type. It stops when this actor
    /// does. See [`ActorSystem::adapter`].
    ///
    /// # Panics
    /// If called outside a tokio runtime.
    pub fn adapter<N, F>(&self, convert: F) -> ActorRef<N>
    where
        N: Send + 'static,
        F: Fn(N) -> A::Msg + Send + Sync + 'static,
    {
        self.system().adapter(self.myself(), convert)
    }
}
