//! Writes a development CA and node certificates for TLS between nodes.
//!
//! ```text
//! cargo run -p remoting-transport --example gen_certs -- certs node1 node2
//! cargo run -p remoting-transport --example gen_certs -- certs node1@10.0.0.5:2552
//! ```
//!
//! writes `certs/ca.pem` (the trust store), `certs/ca.key`, and for every
//! node `certs/NAME.pem` (certificate, then the CA: a chain) and
//! `certs/NAME.key` (PKCS#8), for both server and client authentication (a
//! node dials and is dialled with the same certificate), for one year.
//!
//! Each certificate names its node with URI SANs, which peers check
//! against the node's advertised `name@host:port`:
//! - `NAME` (no host): `tcp://NAME@127.0.0.1` and `tcp://NAME@localhost`,
//!   the node `NAME` on this machine on any port; DNS SANs `localhost`,
//!   `NAME` and IP SAN `127.0.0.1`.
//! - `NAME@HOST:PORT`: `tcp://NAME@HOST:PORT` only, that exact node; a DNS
//!   or IP SAN `HOST`.
//!
//! Development only: the CA key sits next to the certificates.
#![allow(clippy::print_stdout)]

use std::{fs, path::PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "certs".into()));
    let mut nodes: Vec<String> = args.collect();
    if nodes.is_empty() {
        nodes = vec!["node1".into(), "node2".into()];
    }
    fs::create_dir_all(&dir)?;

    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "transport development CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    fs::write(dir.join("ca.pem"), ca_cert.pem())?;
    fs::write(dir.join("ca.key"), ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);

    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let now = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
    let day = std::time::Duration::from_secs(24 * 3600);
    for spec in &nodes {
        let (node, hosts, uris) = match spec.split_once('@') {
            Some((name, host_port)) => {
                let (host, port) = host_port
                    .rsplit_once(':')
                    .ok_or_else(|| format!("{spec}: expected NAME or NAME@HOST:PORT"))?;
                port.parse::<u16>()
                    .map_err(|_| format!("{spec}: {port:?} is not a port"))?;
                let host = host.trim_start_matches('[').trim_end_matches(']');
                (
                    name.to_owned(),
                    vec![host.to_owned()],
                    vec![format!("tcp://{spec}")],
                )
            }
            None => (
                spec.clone(),
                vec!["localhost".to_owned(), spec.clone(), "127.0.0.1".to_owned()],
                vec![
                    format!("tcp://{spec}@127.0.0.1"),
                    format!("tcp://{spec}@localhost"),
                ],
            ),
        };
        let mut p = CertificateParams::new(hosts)?;
        for uri in &uris {
            p.subject_alt_names
                .push(SanType::URI(uri.as_str().try_into()?));
        }
        p.distinguished_name.push(DnType::CommonName, node.as_str());
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        p.not_before = now - day;
        p.not_after = now + day * 365;
        let key = KeyPair::generate()?;
        let cert = p.signed_by(&key, &issuer)?;
        fs::write(
            dir.join(format!("{node}.pem")),
            format!("{}{}", cert.pem(), ca_cert.pem()),
        )?;
        fs::write(dir.join(format!("{node}.key")), key.serialize_pem())?;
        println!(
            "{node} ({}): {} and {}",
            uris.join(", "),
            dir.join(format!("{node}.pem")).display(),
            dir.join(format!("{node}.key")).display()
        );
    }
    println!("trust store: {}", dir.join("ca.pem").display());
    Ok(())
}
