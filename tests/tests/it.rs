//! Integration tests over real sockets on `127.0.0.1`, built as one binary
//! (one link step, one process, tests run in parallel inside it).

mod it {
    mod actors_common;
    mod actors_failure;
    mod actors_local;
    mod actors_remote;
    mod advertise;
    mod backpressure;
    mod bad_input;
    mod bounds;
    mod budget;
    mod close;
    mod cluster;
    mod control;
    mod cookie;
    mod direct;
    mod ergonomics;
    mod evolve;
    mod fail_fast;
    mod faults;
    mod faults_net;
    mod fence;
    mod flow;
    mod hostile;
    mod hostile_transport;
    mod large;
    mod layers;
    mod limits;
    mod links;
    mod metrics;
    mod named;
    mod node_identity;
    mod ordering;
    mod push;
    mod routers;
    mod runs;
    mod runtime;
    mod sharding;
    mod singleton;
    mod supervision;
    mod tls;
    mod trace;
    mod trust;
    mod typed_refs;
    mod undeliverable;
    mod unwatch;
}
