//! `--tls`: certificates for the embedded default, generated at start with
//! rcgen (a throwaway CA and one certificate per node, IP SAN 127.0.0.1 and
//! a URI SAN `tcp://NODE@127.0.0.1` naming the node, any port), or read
//! from files in two-process mode.

use std::path::PathBuf;

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use transport::TlsConfig;

/// TLS settings of both embedded nodes, sharing a fresh in-memory CA.
pub fn generated() -> Result<(TlsConfig, TlsConfig)> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "bench-remote throwaway CA");
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let node = |cn: &str| -> Result<TlsConfig> {
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        p.distinguished_name.push(DnType::CommonName, cn);
        // The node itself (system name `cn`, any port: bound to port 0).
        p.subject_alt_names
            .push(SanType::URI(format!("tcp://{cn}@127.0.0.1").try_into()?));
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let cert = p.signed_by(&key, &issuer)?;
        Ok(TlsConfig::from_pem(
            format!("{}{ca_pem}", cert.pem()),
            key.serialize_pem(),
            ca_pem.clone(),
        ))
    };
    Ok((node("bench-sender")?, node("bench-receiver")?))
}

/// TLS settings from PEM files (two-process mode): `DIR/NODE.pem`,
/// `DIR/NODE.key` and `DIR/ca.pem`, as `cargo run -p remoting-transport --example
/// gen_certs -- DIR NODE` writes them.
pub fn from_dir(dir: &std::path::Path, node: &str) -> TlsConfig {
    let f = |name: String| -> PathBuf { dir.join(name) };
    TlsConfig::from_pem_files(
        f(format!("{node}.pem")),
        f(format!("{node}.key")),
        f("ca.pem".into()),
    )
}
