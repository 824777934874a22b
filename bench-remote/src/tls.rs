//! `--tls`: certificates for the embedded default, generated at start with
//! rcgen (a throwaway CA and one certificate per node, IP SAN 127.0.0.1),
//! or read from files in two-process mode.

use std::path::PathBuf;

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
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
/// `DIR/NODE.key` and `DIR/ca.pem`, as `cargo run -p transport --example
/// gen_certs -- DIR NODE` writes them.
pub fn from_dir(dir: &std::path::Path, node: &str) -> TlsConfig {
    let f = |name: String| -> PathBuf { dir.join(name) };
    TlsConfig::from_pem_files(
        f(format!("{node}.pem")),
        f(format!("{node}.key")),
        f("ca.pem".into()),
    )
}
