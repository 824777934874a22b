//! Bind vs advertise: a node bound to every interface is known, and
//! reached, by the name it advertises.

use actors::{ActorSystem, ResolveError, SystemConfig, SystemError};
use integration_tests::{secured_system, within};

use super::actors_common::{Count, Counter, total};

async fn advertised(name: &str, bind: &str, advertise: &str) -> Result<ActorSystem, SystemError> {
    let mut config = SystemConfig::default();
    config.set_advertised_address(advertise);
    ActorSystem::with_config(
        name,
        Some(bind.parse().expect("a socket address")),
        secured_system(config),
    )
    .await
}

#[tokio::test]
async fn a_node_bound_to_every_interface_is_reached_by_its_advertised_name() {
    let a = advertised("a", "0.0.0.0:0", "localhost")
        .await
        .expect("binds");
    let port = a.local_addr().expect("remoting").port();
    assert_eq!(a.node(), format!("a@localhost:{port}"));
    a.spawn_named("counter", Counter::default()).expect("free");
    let b = integration_tests::actor_system("b").await;
    let counter = within(
        "resolve by name",
        b.resolve::<Count>(&format!("tcp://a@localhost:{port}/user/counter")),
    )
    .await
    .expect("reached by its advertised name");
    counter.tell(Count::Add(3)).expect("room");
    assert_eq!(total(&counter).await, 3);
    // Its actors' paths carry the name, so refs to them work from anywhere
    // that resolves it; the bound address is not its identity.
    let err = within(
        "resolve by socket",
        b.resolve::<Count>(&format!("tcp://a@127.0.0.1:{port}/user/counter")),
    )
    .await
    .expect_err("the socket is not the node's name");
    assert!(
        matches!(&err, ResolveError::Unreachable { reason, .. } if reason.contains("identifies as")),
        "{err}"
    );
}

#[tokio::test]
async fn an_advertised_address_with_a_port_is_used_as_given() {
    let a = advertised("a", "127.0.0.1:0", "gateway.example:7000")
        .await
        .expect("binds");
    assert_eq!(a.node(), "a@gateway.example:7000");
}

#[tokio::test]
async fn an_advertised_address_no_path_can_hold_is_refused() {
    for bad in ["", "two words", "host:port:x", "a/b"] {
        let err = advertised("a", "127.0.0.1:0", bad)
            .await
            .err()
            .unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert!(
            matches!(err, SystemError::InvalidAdvertised(_)),
            "{bad:?}: {err}"
        );
    }
}
