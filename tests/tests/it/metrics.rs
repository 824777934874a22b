//! Metrics reach a recorder: each test installs a recorder for its own
//! thread only, on a current-thread runtime, so every task of its nodes
//! (all on that thread) records into it and tests running in parallel do
//! not see each other's values.
//!
//! The recorder must be installed before the systems are built: handles
//! are registered with the recorder in place then.

use std::{sync::atomic::Ordering, time::Duration};

use actors::{ActorRef, ActorSystem, RemoteEvent, manifest_id};
use integration_tests::{
    actor_path, actor_system_with, envelope, eventually, frame_bytes, raw_actor_peer, within,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use tokio::{io::AsyncWriteExt, sync::mpsc};
use transport::FrameKind;

use super::actors_common::{Collector, Count, Counter as CounterActor, total};
use super::faults_net::{Proxied, fast_config};

/// A recorder whose values can be read without resetting them (the
/// debugging recorder of `metrics-util` zeroes counters and gauges on
/// each snapshot, which loses a gauge that is only incremented and
/// decremented).
struct Seen(Registry<Key, AtomicStorage>);

impl Recorder for Seen {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

/// Whether `key` has exactly these labels.
fn matches(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
    key.name() == name
        && key.labels().count() == labels.len()
        && labels
            .iter()
            .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
}

impl Seen {
    fn new() -> Seen {
        Seen(Registry::atomic())
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.0
            .get_counter_handles()
            .into_iter()
            .find(|(k, _)| matches(k, name, labels))
            .map_or(0, |(_, c)| c.load(Ordering::Relaxed))
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0
            .get_gauge_handles()
            .into_iter()
            .find(|(k, _)| matches(k, name, labels))
            .map(|(_, g)| f64::from_bits(g.load(Ordering::Relaxed)))
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.0
            .get_histogram_handles()
            .into_iter()
            .find(|(k, _)| matches(k, name, labels))
            .map_or(0, |(_, h)| h.data().len())
    }
}

/// Two nodes that publish per-peer metrics every 50 ms, their failure
/// detectors allowing `pause` (a shorter one gives a larger phi).
async fn pair_with(pause: Duration) -> (ActorSystem, ActorSystem) {
    let config = fast_config(pause);
    let a = actor_system_with("a", config.clone()).await;
    let b = actor_system_with("b", config).await;
    (a, b)
}

async fn pair() -> (ActorSystem, ActorSystem) {
    pair_with(Duration::from_secs(10)).await
}

#[tokio::test(flavor = "current_thread")]
async fn per_peer_traffic_and_per_actor_metrics_reach_the_recorder() {
    let seen = Seen::new();
    let _installed = metrics::set_default_local_recorder(&seen);
    // A 10 s pause would make phi 0.0 in floating point; 300 ms is far
    // from the threshold (a stall of about 700 ms) yet above 0.
    let (a, b) = pair_with(Duration::from_millis(300)).await;
    let (an, bn) = (a.node().to_owned(), b.node().to_owned());
    let _counter = b
        .spawn_named("counter", CounterActor::default())
        .expect("free");
    let remote: ActorRef<Count> = within("resolve", a.resolve(&actor_path(&b, "counter")))
        .await
        .expect("resolves");
    for _ in 0..100 {
        remote.tell(Count::Add(1)).expect("room");
    }
    assert_eq!(total(&remote).await, 100);

    let a_to_b = [("node", an.as_str()), ("peer", bn.as_str())];
    let b_from_a = [("node", bn.as_str()), ("peer", an.as_str())];
    eventually("a's frames and bytes out to b, b's in from a", || {
        seen.counter("remoting_frames_out_total", &a_to_b) >= 101
            && seen.counter("remoting_frames_in_total", &b_from_a) >= 101
            && seen.counter("remoting_bytes_out_total", &a_to_b) > 100 * 9
            && seen.counter("remoting_bytes_in_total", &b_from_a) > 100 * 9
            && seen.counter("remoting_writes_total", &a_to_b) > 0
    })
    .await;
    // Batching: fewer writes than frames, and the gauge says by how much.
    let writes = seen.counter("remoting_writes_total", &a_to_b);
    let frames = seen.counter("remoting_frames_out_total", &a_to_b);
    assert!(writes <= frames, "{writes} writes for {frames} frames");
    eventually("a's frames per write gauge", || {
        seen.gauge("remoting_frames_per_write", &a_to_b)
            .is_some_and(|g| g >= 1.0)
    })
    .await;
    eventually("phi for b, once heartbeats are acked", || {
        seen.gauge("remoting_phi", &a_to_b)
            .is_some_and(|phi| phi > 0.0)
            && seen.gauge("remoting_queue_bytes", &a_to_b) == Some(0.0)
    })
    .await;
    eventually("the association gauge", || {
        seen.gauge("remoting_associations", &[("node", an.as_str())]) == Some(1.0)
    })
    .await;

    // Per actor type on b: alive, and the handling time and mailbox depth
    // of the 101 messages it handled.
    let counter_on_b = [("node", bn.as_str()), ("actor", "Counter")];
    assert_eq!(seen.gauge("actors_alive", &counter_on_b), Some(1.0));
    assert_eq!(seen.samples("actors_handling_seconds", &counter_on_b), 101);
    let batches = seen.samples("actors_mailbox_depth", &counter_on_b);
    assert!((1..=101).contains(&batches), "{batches} batches");

    // A message to a stopped actor is a dead letter, by its reason.
    remote.tell(Count::Stop).expect("room");
    eventually("the counter stops", || {
        seen.gauge("actors_alive", &counter_on_b) == Some(0.0)
    })
    .await;
    // Whether b's link still holds the stopped actor's entry or looks its
    // path up again decides which of the two reasons it is.
    let gone = |seen: &Seen| {
        ["actor_stopped", "no_actor"]
            .into_iter()
            .map(|r| {
                seen.counter(
                    "actors_dead_letters_total",
                    &[("node", bn.as_str()), ("reason", r)],
                )
            })
            .sum::<u64>()
    };
    let before = gone(&seen);
    let _ = remote.tell(Count::Add(1));
    eventually("b counts a dead letter for the stopped actor", || {
        gone(&seen) == before + 1
    })
    .await;
    assert_eq!(
        seen.counter(
            "actors_dead_letters_total",
            &[("node", bn.as_str()), ("reason", "other")]
        ),
        0
    );

    within("a shuts down", a.shutdown()).await;
    within("b shuts down", b.shutdown()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn large_message_fragments_are_counted_both_ways() {
    let seen = Seen::new();
    let _installed = metrics::set_default_local_recorder(&seen);
    let (a, b) = pair().await;
    let (an, bn) = (a.node().to_owned(), b.node().to_owned());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let _sink = b
        .spawn_named("sink", Collector::<Vec<u8>> { out: tx })
        .expect("free");
    let remote: ActorRef<Vec<u8>> = within("resolve", a.resolve(&actor_path(&b, "sink")))
        .await
        .expect("resolves");
    // 1 MiB: past the 256 KiB threshold, 16 fragments of 64 KiB or more.
    remote.tell(vec![7u8; 1 << 20]).expect("room");
    let got = within("the large message", rx.recv())
        .await
        .expect("arrives");
    assert_eq!(got.len(), 1 << 20);
    eventually("fragments out of a and into b", || {
        seen.counter(
            "remoting_large_fragments_out_total",
            &[("node", an.as_str()), ("peer", bn.as_str())],
        ) >= 16
            && seen.counter(
                "remoting_large_fragments_in_total",
                &[("node", bn.as_str()), ("peer", an.as_str())],
            ) >= 16
    })
    .await;
    within("a shuts down", a.shutdown()).await;
    within("b shuts down", b.shutdown()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn malformed_input_is_counted_by_kind() {
    let seen = Seen::new();
    let _installed = metrics::set_default_local_recorder(&seen);
    let (b, _) = pair().await;
    let bn = b.node().to_owned();
    let (mut raw, _) = raw_actor_peer(&b).await;
    let count = manifest_id("it.Count");
    for env in [
        envelope(9, None, count, &[0]),
        envelope(10, None, count, &[0]),
        vec![1, 2],
    ] {
        raw.write_all(&frame_bytes(FrameKind::Message, &env))
            .await
            .expect("write");
    }
    eventually("two unknown recipients and a short envelope", || {
        seen.counter(
            "remoting_malformed_total",
            &[("node", bn.as_str()), ("kind", "recipient")],
        ) == 2
            && seen.counter(
                "remoting_malformed_total",
                &[("node", bn.as_str()), ("kind", "envelope")],
            ) == 1
    })
    .await;
    // Each is a dead letter too.
    assert_eq!(
        seen.counter(
            "actors_dead_letters_total",
            &[("node", bn.as_str()), ("reason", "malformed")],
        ),
        3
    );
    // Hung up first: a shutdown would wait for the raw peer's close.
    drop(raw);
    within("b shuts down", b.shutdown()).await;
}

/// Messages sent on the first link in `reconnects_and_...`.
const FIRST_LINK: u64 = 3_000;

#[tokio::test(flavor = "current_thread")]
async fn reconnects_and_quarantines_are_counted_per_peer() {
    let seen = Seen::new();
    let _installed = metrics::set_default_local_recorder(&seen);
    let mut config = fast_config(Duration::from_secs(10));
    // Each tell its own frame, so that frames count tells (runs pack
    // many into one).
    config.set_message_runs(false);
    let p = Proxied::new(config).await;
    let (an, bn) = (p.a.node().to_owned(), p.b.node().to_owned());
    let a_to_b = [("node", an.as_str()), ("peer", bn.as_str())];
    let mut events = p.a.subscribe_remote_events();
    let _counter =
        p.b.spawn_named("counter", CounterActor::default())
            .expect("free");
    let remote: ActorRef<Count> = within("resolve", p.a.resolve(&actor_path(&p.b, "counter")))
        .await
        .expect("resolves");
    // A watch keeps the link needed: a reconnects after a reset.
    let _watch = remote.watch();
    // Enough frames that heartbeats on the next link (one each way per
    // 50 ms) could not make up for losing them within the test's timeout.
    for _ in 0..FIRST_LINK {
        remote.tell(Count::Add(1)).expect("room");
    }
    assert_eq!(total(&remote).await, FIRST_LINK);
    eventually("a's frames to b on the first link", || {
        seen.counter("remoting_frames_out_total", &a_to_b) > FIRST_LINK
    })
    .await;
    let first = seen.counter("remoting_frames_out_total", &a_to_b);
    p.to_b.reset_all().await;
    within("a's link to b comes back", async {
        let mut lost = false;
        loop {
            match events.recv().await.expect("events") {
                RemoteEvent::Disconnected { .. } => lost = true,
                RemoteEvent::Connected { .. } if lost => return,
                _ => {}
            }
        }
    })
    .await;
    eventually("a reconnect to b", || {
        seen.counter("remoting_reconnects_total", &a_to_b) >= 1
    })
    .await;
    assert_eq!(seen.counter("remoting_quarantines_total", &a_to_b), 0);
    // The ended connection's frames still count: the total goes on from
    // them.
    for _ in 0..10 {
        remote.tell(Count::Add(1)).expect("room");
    }
    assert_eq!(total(&remote).await, FIRST_LINK + 10);
    eventually("frames on both links", || {
        seen.counter("remoting_frames_out_total", &a_to_b) >= first + 11
    })
    .await;
    assert_eq!(seen.counter("remoting_quarantines_total", &a_to_b), 0);
    // b's shutdown notice quarantines its incarnation on a.
    within("b shuts down", p.b.shutdown()).await;
    eventually("b's incarnation quarantined on a", || {
        seen.counter("remoting_quarantines_total", &a_to_b) == 1
    })
    .await;
    within("a shuts down", p.a.shutdown()).await;
}

/// Membership metrics: three cluster nodes on this thread's recorder, one
/// actor in a group, a forged and a foreign packet, then a silent node.
#[tokio::test(flavor = "current_thread")]
async fn cluster_membership_metrics_reach_the_recorder() {
    use actors::cluster::{Cluster, ClusterConfig};

    let seen = Seen::new();
    let _installed = metrics::set_default_local_recorder(&seen);
    let mut config = ClusterConfig::new();
    config
        .set_probe(Duration::from_millis(100), Duration::from_millis(50))
        .expect("valid probe periods")
        .set_suspect_timeout(Duration::from_millis(300))
        .set_remove_down_after(Duration::from_secs(30))
        .set_announce_interval(Duration::from_millis(50))
        .expect("a valid interval");
    let mut nodes = Vec::new();
    for i in 0..3 {
        let s = actor_system_with(&format!("m{i}"), actors::SystemConfig::default()).await;
        let c = match nodes.first() {
            Some((_, first)) => {
                integration_tests::seeded(&config, Cluster::myself(first).udp.to_string())
            }
            None => config.clone(),
        };
        let cluster = Cluster::join(&s, c).await.expect("joins");
        nodes.push((s, cluster));
    }
    let names: Vec<String> = nodes.iter().map(|(s, _)| s.node().to_owned()).collect();
    let node = |i: usize| [("node", names[i].as_str())];
    let state = |i: usize, s: &'static str| [("node", names[i].as_str()), ("state", s)];
    let counter = nodes[0]
        .0
        .spawn_named("counter", CounterActor::default())
        .expect("free");
    nodes[0]
        .1
        .join_group("g", &counter)
        .await
        .expect("joins the group");
    eventually("every node: two members up, one group entry", || {
        (0..3).all(|i| {
            seen.gauge("actors_cluster_members", &state(i, "up")) == Some(2.0)
                && seen.gauge("actors_cluster_group_entries", &node(i)) == Some(1.0)
        })
    })
    .await;
    for i in 0..3 {
        assert!(seen.counter("actors_cluster_packets_out_total", &node(i)) > 0);
        assert!(seen.counter("actors_cluster_packets_in_total", &node(i)) > 0);
        assert!(seen.counter("actors_cluster_bytes_out_total", &node(i)) > 0);
        assert!(seen.counter("actors_cluster_bytes_in_total", &node(i)) > 0);
        assert_eq!(
            seen.gauge("actors_cluster_members", &state(i, "down")),
            Some(0.0)
        );
    }

    // Refused packets, by kind.
    let target = nodes[0].1.myself().udp;
    let raw = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("binds");
    raw.send_to(b"hello", target).await.expect("sent");
    let mut forged = b"RC\x01\x00".to_vec();
    forged.extend_from_slice(&[0u8; 16]);
    forged.extend_from_slice(b"payload");
    raw.send_to(&forged, target).await.expect("sent");
    let refused = |kind: &'static str| {
        seen.counter(
            "actors_cluster_refused_total",
            &[("node", names[0].as_str()), ("kind", kind)],
        )
    };
    eventually("one malformed and one unauthenticated packet", || {
        refused("malformed") == 1 && refused("unauthenticated") == 1
    })
    .await;
    assert_eq!(refused("full"), 0);

    // A node that falls silent is down in the others' gauges, and its
    // group entry is gone.
    let (silent_system, silent) = nodes.remove(0);
    drop(silent);
    eventually("the silent node is down, its entry gone", || {
        (1..3).all(|i| {
            seen.gauge("actors_cluster_members", &state(i, "down")) == Some(1.0)
                && seen.gauge("actors_cluster_members", &state(i, "up")) == Some(1.0)
                && seen.gauge("actors_cluster_group_entries", &node(i)) == Some(0.0)
        })
    })
    .await;
    within("shutdown", silent_system.shutdown()).await;
    for (s, _) in nodes {
        within("shutdown", s.shutdown()).await;
    }
}

/// Dead letters are labelled by their cause, not by the wording of their
/// text: a tell through a router with no routee was once `other`.
#[tokio::test(flavor = "current_thread")]
async fn dead_letters_are_labelled_by_their_typed_reason() {
    use actors::{
        DeadLetterReason,
        router::{Router, RoutingLogic},
    };
    let seen = Seen::new();
    let _installed = metrics::set_default_local_recorder(&seen);
    let sys = ActorSystem::local("labels").expect("a valid name");
    let node = sys.node().to_owned();
    let router =
        Router::builder(RoutingLogic::round_robin()).group(&sys, Vec::<ActorRef<Count>>::new());
    assert!(router.tell(Count::Add(1)).is_err(), "no routee takes it");
    let label = DeadLetterReason::NoRoutee.label();
    assert_eq!(label, "no_routee");
    assert_eq!(
        seen.counter(
            "actors_dead_letters_total",
            &[("node", node.as_str()), ("reason", label)],
        ),
        1
    );
    assert_eq!(sys.dead_letters(), 1);
    within("shuts down", sys.shutdown()).await;
}
