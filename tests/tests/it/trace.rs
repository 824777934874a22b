//! Trace-context propagation across nodes: a context set where a request
//! starts is the context of the remote handler, and of what that handler
//! sends on; off (the default), a message costs no byte more.

use std::time::Duration;

use actors::{
    Actor, ActorRef, ActorResult, ActorSystem, Ctx, HeartbeatConfig, RemoteMessage, SystemConfig,
    TraceContext,
};
use integration_tests::{actor_path, actor_system_with, within};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A request; `then` is told `Seen` from inside the handler.
#[derive(Debug, Serialize, Deserialize)]
enum Req {
    Note(u32),
    Ask(ActorRef<u32>, ActorRef<Seen>),
    /// Answered with 8 from inside a span of the handler's own (`SPAN`).
    AskSpan(ActorRef<u32>),
}

/// The span a handler starts and replies in (`Req::AskSpan`).
fn span() -> TraceContext {
    TraceContext::new([3; 16], [5; 8], 1).unwrap()
}

impl RemoteMessage for Req {
    const MANIFEST: &'static str = "it.trace.Req";
}

#[derive(Debug, Serialize, Deserialize)]
struct Seen(u32);

impl RemoteMessage for Seen {
    const MANIFEST: &'static str = "it.trace.Seen";
}

/// Reports the trace context each message was handled in.
struct Service(UnboundedSender<Option<TraceContext>>);

impl Actor for Service {
    type Msg = Req;

    async fn handle(&mut self, m: Req, ctx: &mut Ctx<Self>) -> ActorResult {
        let _ = self.0.send(ctx.trace_context());
        match m {
            Req::Ask(reply, then) => {
                // Both in the handler's scope, with no code of ours to say so.
                let _ = then.tell(Seen(1));
                let _ = reply.tell(7);
            }
            Req::AskSpan(reply) => {
                let _ = span().sync_scope(|| reply.tell(8));
            }
            Req::Note(_) => {}
        }
        Ok(())
    }
}

/// Reports the context `Seen` arrived in.
struct Recorder(UnboundedSender<Option<TraceContext>>);

impl Actor for Recorder {
    type Msg = Seen;

    async fn handle(&mut self, _: Seen, ctx: &mut Ctx<Self>) -> ActorResult {
        let _ = self.0.send(ctx.trace_context());
        Ok(())
    }
}

/// A config with trace propagation `on` (else the default, off), and
/// heartbeats rare enough that none is sent while bytes are counted.
fn config(on: bool) -> SystemConfig {
    let mut c = SystemConfig::default();
    if on {
        c.set_trace_propagation(true);
    }
    // Each message in its own envelope, so that the bytes a message costs
    // are exact (a run shares one envelope among many; messages with a
    // context never ride in one).
    c.set_message_runs(false);
    let mut hb = HeartbeatConfig::default();
    hb.set_interval(Duration::from_secs(600))
        .unwrap()
        .set_acceptable_pause(Duration::from_secs(3600));
    c.set_heartbeat(hb);
    c
}

async fn next(rx: &mut UnboundedReceiver<Option<TraceContext>>) -> Option<TraceContext> {
    within("a handled message", rx.recv())
        .await
        .expect("the actor lives")
}

#[tokio::test(flavor = "current_thread")]
async fn a_context_set_on_the_sender_is_the_remote_handlers_and_travels_on() {
    let tc = TraceContext::parse_traceparent(HEADER).unwrap();
    let a = actor_system_with("a", config(true)).await;
    let b = actor_system_with("b", config(true)).await;
    let (tx, mut handled) = unbounded_channel();
    b.spawn_named("service", Service(tx)).unwrap();
    let (tx, mut recorded) = unbounded_channel();
    let recorder = a.spawn_named("recorder", Recorder(tx)).unwrap();
    let service = a.resolve::<Req>(&actor_path(&b, "service")).await.unwrap();

    // Outside any scope: no context.
    service.tell(Req::Note(0)).unwrap();
    assert_eq!(next(&mut handled).await, None);
    // A tell inside a scope.
    tc.scope(async { service.tell(Req::Note(1)).unwrap() })
        .await;
    assert_eq!(next(&mut handled).await, Some(tc));
    // An ask inside a scope: the handler runs in the context, and what it
    // sends (to a third actor, and the reply) carries it on.
    let child = tc.with_parent_id([9; 8]).unwrap();
    let answer = child
        .scope(service.ask(
            |reply| Req::Ask(reply, recorder.clone()),
            Duration::from_secs(5),
        ))
        .await;
    assert_eq!(answer, Ok(7));
    assert_eq!(next(&mut handled).await, Some(child));
    assert_eq!(next(&mut recorded).await, Some(child));
    // The context ends with its scope.
    service.tell(Req::Note(2)).unwrap();
    assert_eq!(next(&mut handled).await, None);
    a.shutdown().await;
    b.shutdown().await;
}

/// Bytes `from` writes to send `n` notes to `to`'s service inside a
/// trace scope (after one, so the recipient's id is defined).
async fn bytes_for_notes(
    from: &ActorSystem,
    service: &ActorRef<Req>,
    handled: &mut UnboundedReceiver<Option<TraceContext>>,
    n: u32,
) -> (u64, Option<TraceContext>) {
    let tc = TraceContext::parse_traceparent(HEADER).unwrap();
    service.tell(Req::Note(0)).unwrap();
    next(handled).await;
    let before = from.remote_stats().bytes_out;
    let mut seen = None;
    tc.scope(async {
        for i in 0..n {
            service.tell(Req::Note(i)).unwrap();
        }
    })
    .await;
    for _ in 0..n {
        seen = next(handled).await;
    }
    (from.remote_stats().bytes_out - before, seen)
}

#[tokio::test(flavor = "current_thread")]
async fn off_by_default_and_off_costs_no_byte() {
    let receiver = actor_system_with("rx", config(false)).await;
    let (tx, mut handled) = unbounded_channel();
    receiver.spawn_named("service", Service(tx)).unwrap();
    let path = actor_path(&receiver, "service");
    let mut sent = Vec::new();
    for on in [false, true] {
        let sender = actor_system_with(if on { "on" } else { "off" }, config(on)).await;
        let service = sender.resolve::<Req>(&path).await.unwrap();
        sent.push(bytes_for_notes(&sender, &service, &mut handled, 100).await);
        sender.shutdown().await;
    }
    let (off, on) = (sent[0], sent[1]);
    assert_eq!(off.1, None, "off by default: nothing travels");
    assert!(on.1.is_some());
    // Off: a frame header, the 9-byte envelope header and the 2-byte
    // message, as before trace propagation existed.
    assert_eq!(off.0, 100 * (transport::frame::HEADER_LEN as u64 + 9 + 2));
    // On: the extension block (1 byte) and the context (25) per message.
    assert_eq!(on.0 - off.0, 100 * 26, "off {off:?}, on {on:?}");
    receiver.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_reply_brings_its_context_back_to_the_asker() {
    let tc = TraceContext::parse_traceparent(HEADER).unwrap();
    let a = actor_system_with("a", config(true)).await;
    let b = actor_system_with("b", config(true)).await;
    let (tx, _handled) = unbounded_channel();
    b.spawn_named("service", Service(tx.clone())).unwrap();
    let (sink_tx, _sink) = unbounded_channel();
    let sink = a.spawn_named("sink", Recorder(sink_tx)).unwrap();
    let service = a.resolve::<Req>(&actor_path(&b, "service")).await.unwrap();
    let t = Duration::from_secs(5);

    // The remote handler ran in the request's context and replied in it:
    // the reply brings it back.
    let got = tc
        .scope(service.ask_traced(|r| Req::Ask(r, sink.clone()), t))
        .await;
    assert_eq!(got, Ok((7, Some(tc))));
    // A handler that replies inside a span of its own returns that span.
    let got = tc.scope(service.ask_traced(Req::AskSpan, t)).await;
    assert_eq!(got, Ok((8, Some(span()))));
    // Outside any scope the reply comes without one; `ask` is the same
    // ask without the context.
    let got = service.ask_traced(|r| Req::Ask(r, sink.clone()), t).await;
    assert_eq!(got, Ok((7, None)));
    assert_eq!(service.ask(Req::AskSpan, t).await, Ok(8));
    // A local reply comes in the context its sender ran in, too.
    let local = a.spawn(Service(tx));
    assert_eq!(
        local.ask_traced(Req::AskSpan, t).await,
        Ok((8, Some(span())))
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// Reports each note with the context it was handled in.
struct Notes(UnboundedSender<(u32, Option<TraceContext>)>);

impl Actor for Notes {
    type Msg = Req;

    async fn handle(&mut self, m: Req, ctx: &mut Ctx<Self>) -> ActorResult {
        if let Req::Note(n) = m {
            let _ = self.0.send((n, ctx.trace_context()));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn plain_and_traced_messages_of_one_batch_keep_their_order_and_contexts() {
    let tc = TraceContext::parse_traceparent(HEADER).unwrap();
    let other = tc.with_parent_id([7; 8]).unwrap();
    let a = actor_system_with("a", config(true)).await;
    let b = actor_system_with("b", config(true)).await;
    let (tx, mut notes) = unbounded_channel();
    b.spawn_named("notes", Notes(tx)).unwrap();
    let notes_ref = a.resolve::<Req>(&actor_path(&b, "notes")).await.unwrap();
    // No await between the tells: they share writes, reads and batches,
    // plain records before, between and after traced ones.
    let mut want = Vec::new();
    for i in 0..300u32 {
        let ctx = match i % 7 {
            0 | 1 => None,
            2 | 5 => Some(tc),
            3 => Some(other),
            _ => None,
        };
        match ctx {
            None => notes_ref.tell(Req::Note(i)).unwrap(),
            Some(c) => c.sync_scope(|| notes_ref.tell(Req::Note(i))).unwrap(),
        }
        want.push((i, ctx));
    }
    let mut got = Vec::new();
    while got.len() < want.len() {
        got.push(
            within("a note", notes.recv())
                .await
                .expect("the actor lives"),
        );
    }
    assert_eq!(got, want);
    a.shutdown().await;
    b.shutdown().await;
}
