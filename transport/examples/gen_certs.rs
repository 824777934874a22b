//! Writes a development CA and node certificates for TLS between nodes.
//!
//! ```text
//! cargo run -p transport --example gen_certs -- certs node1 node2
//! ```
//!
//! writes `certs/ca.pem` (the trust store), `certs/ca.key`, and for every
//! node `certs/NODE.pem` (certificate, then the CA: a chain) and
//! `certs/NODE.key` (PKCS#8). Each node certificate is valid for DNS
//! `localhost`, DNS `NODE` and IP `127.0.0.1`, for both server and client
//! authentication (a node dials and is dialled with the same certificate),
//! for one year. Development only: the CA key sits next to the certificates.
#![allow(clippy::print_stdout)]

use std::{fs, path::PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
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
    for node in &nodes {
        let mut p = CertificateParams::new(vec![
            "localhost".to_owned(),
            node.clone(),
            "127.0.0.1".to_owned(),
        ])?;
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
            "{node}: {} and {}",
            dir.join(format!("{node}.pem")).display(),
            dir.join(format!("{node}.key")).display()
        );
    }
    println!("trust store: {}", dir.join("ca.pem").display());
    Ok(())
}
