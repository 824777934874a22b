//! `#[derive(RemoteMessage)]` for the `remoting-actors` crate (library
//! `actors`), which re-exports it as `actors::RemoteMessage` behind its
//! default `derive` feature. Use it through that re-export; this crate's
//! docs are the rules, the examples live on the trait.
//!
//! # The manifest
//! A message type's manifest is its name on the wire. Without an
//! attribute it is **`<package>.<Type>`**: the Cargo package name of the
//! crate that derives (`env!("CARGO_PKG_NAME")`, expanded there) and the
//! type's name as written, e.g. `my-service.Order`.
//!
//! Why not the module path: moving a type to another module is a refactor
//! nobody expects to change the wire, and a mixed-version cluster would
//! stop understanding itself. The package and type names are what a human
//! sees as the type's identity. The trade-off: renaming the package or
//! the type changes the manifest, and two types with one name in two
//! modules of one package share it (the runtime refuses the second one it
//! registers, naming both: `SpawnError::ManifestShared`). Give one of them (or any type whose
//! name must outlive renames) an explicit, stable manifest:
//!
//! ```text
//! #[derive(Serialize, Deserialize, RemoteMessage)]
//! #[remote(manifest = "svc.Order")]
//! struct Order { .. }
//! ```
//!
//! # Generic types
//! Type parameters become part of the name: `struct Page<T>` derives
//! `<package>.Page<{T's manifest}>` (with `manifest = "svc.Page"`:
//! `svc.Page<{T's manifest}>`), and requires `T: RemoteMessage`, so
//! `Page<Order>` and `Page<Invoice>` never decode as each other. Lifetime
//! and const parameters are refused: a remote message is decoded into an
//! owned value.
//!
//! # Local-only variants
//! Variants marked `#[serde(skip)]` (or `skip_deserializing`) can be sent
//! in-process but never decoded from a peer. They must come after every
//! other variant: serde encodes a variant's position among all variants
//! but decodes positions counted without the skipped ones, so a variant
//! after a skipped one would not decode as sent. The derive refuses that
//! order with a compile error.
//!
//! # Attributes
//! - `#[remote(manifest = "name")]`: the manifest, instead of the default.
//! - `#[remote(crate = "path")]`: where the `actors` crate is, when it is
//!   renamed in `Cargo.toml` (default `::actors`).
//! - `#[remote(direct)]`: encode without serde's visitors. The derive also
//!   implements `actors::direct::DirectEncode`, writing each variant's
//!   index and each field in declaration order, the bytes serde would
//!   write in bincode's format; `encode` uses it (decoding still goes
//!   through serde). Every field's type implements `DirectEncode`, or the
//!   field is marked `#[remote(serde)]` to be written through serde. Serde
//!   attributes on fields and variants, and container attributes that
//!   change what serde writes, are refused with `direct`: the direct
//!   encoder could not follow them. See `actors::direct`.
#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{Data, DeriveInput, GenericParam, LitStr, Path, parse_macro_input};

/// Implements `actors::RemoteMessage` for a serde type: see the crate docs
/// for the manifest it gets and the `#[remote(..)]` attributes.
#[proc_macro_derive(RemoteMessage, attributes(remote))]
pub fn derive_remote_message(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

struct Options {
    manifest: Option<LitStr>,
    krate: Option<Path>,
    direct: bool,
}

fn options(input: &DeriveInput) -> syn::Result<Options> {
    let mut opts = Options {
        manifest: None,
        krate: None,
        direct: false,
    };
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("remote")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("manifest") {
                let lit: LitStr = meta.value()?.parse()?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(lit.span(), "a manifest cannot be empty"));
                }
                if opts.manifest.replace(lit).is_some() {
                    return Err(meta.error("`manifest` is given twice"));
                }
                Ok(())
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                opts.krate = Some(lit.parse()?);
                Ok(())
            } else if meta.path.is_ident("direct") {
                opts.direct = true;
                Ok(())
            } else {
                Err(meta
                    .error("unknown `remote` attribute: expected `manifest`, `crate` or `direct`"))
            }
        })?;
    }
    Ok(opts)
}

/// True for a variant serde never decodes: `#[serde(skip)]` or
/// `#[serde(skip_deserializing)]`.
fn never_decoded(v: &syn::Variant) -> bool {
    v.attrs
        .iter()
        .filter(|a| a.path().is_ident("serde"))
        .filter_map(|a| a.meta.require_list().ok())
        .any(|list| {
            list.tokens.clone().into_iter().any(|t| {
                matches!(&t, proc_macro2::TokenTree::Ident(i)
                    if i == "skip" || i == "skip_deserializing")
            })
        })
}

/// Local-only variants (see [`never_decoded`]) must come after every other:
/// serde encodes a variant as its position among all variants, but decodes
/// positions counted without the skipped ones, so a variant after a
/// skipped one would be refused by the receiver or, worse, decoded as its
/// neighbour.
fn local_only_last(e: &syn::DataEnum) -> syn::Result<()> {
    let mut skipped: Option<&syn::Variant> = None;
    for v in &e.variants {
        match (never_decoded(v), skipped) {
            (true, None) => skipped = Some(v),
            (false, Some(s)) => {
                return Err(syn::Error::new_spanned(
                    &v.ident,
                    format!(
                        "variant `{}` comes after the local-only (`#[serde(skip)]`) variant `{}`: \
                         serde decodes variants numbered without the skipped ones, so a peer's \
                         `{}` would not decode as sent; move local-only variants to the end",
                        v.ident, s.ident, v.ident
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Container attributes of serde's that change what it writes: a direct
/// encoder that ignored them would send what the peer cannot decode.
const CHANGES_THE_BYTES: &[&str] = &[
    "transparent",
    "into",
    "tag",
    "untagged",
    "content",
    "remote",
];

/// The first `#[serde(..)]` attribute in `attrs`, if any.
fn serde_attr(attrs: &[syn::Attribute]) -> Option<&syn::Attribute> {
    attrs.iter().find(|a| a.path().is_ident("serde"))
}

/// Whether a field is marked `#[remote(serde)]`; refuses other `remote`
/// attributes on a field, and any with `serde` when the type is not
/// `direct`.
fn through_serde(field: &syn::Field, direct: bool) -> syn::Result<bool> {
    let mut serde = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("remote")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("serde") {
                serde = true;
                Ok(())
            } else {
                Err(meta.error("unknown `remote` attribute on a field: expected `serde`"))
            }
        })?;
        if !direct {
            return Err(syn::Error::new_spanned(
                attr,
                "`#[remote(serde)]` on a field only means something with `#[remote(direct)]` \
                 on the type (every field goes through serde without it)",
            ));
        }
    }
    Ok(serde)
}

/// Refuses `remote` attributes on variants: none exist.
fn no_variant_attrs(v: &syn::Variant) -> syn::Result<()> {
    match v.attrs.iter().find(|a| a.path().is_ident("remote")) {
        Some(a) => Err(syn::Error::new_spanned(
            a,
            "`#[remote(..)]` goes on the type or on a field, not on a variant",
        )),
        None => Ok(()),
    }
}

/// What `#[remote(direct)]` cannot follow.
fn direct_refusals(input: &DeriveInput) -> syn::Result<()> {
    const WHY: &str = "`#[remote(direct)]` writes bincode's format itself and cannot follow \
                       serde attributes on fields and variants: remove the attribute, or \
                       `direct` (the peer would decode something else than was sent)";
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let list = attr.meta.require_list()?;
        for t in list.tokens.clone() {
            if let proc_macro2::TokenTree::Ident(i) = &t
                && CHANGES_THE_BYTES.iter().any(|c| i == c)
            {
                return Err(syn::Error::new_spanned(
                    attr,
                    format!(
                        "`#[remote(direct)]` cannot follow `#[serde({i} ..)]`, which changes \
                         what serde writes: remove one of them"
                    ),
                ));
            }
        }
    }
    if let Data::Enum(e) = &input.data
        && let Some(a) = e.variants.iter().find_map(|v| serde_attr(&v.attrs))
    {
        return Err(syn::Error::new_spanned(a, WHY));
    }
    match all_fields(&input.data).find_map(|f| serde_attr(&f.attrs)) {
        Some(a) => Err(syn::Error::new_spanned(a, WHY)),
        None => Ok(()),
    }
}

/// Every field of a struct, or of every variant of an enum.
fn all_fields(data: &Data) -> Box<dyn Iterator<Item = &syn::Field> + '_> {
    match data {
        Data::Struct(s) => Box::new(s.fields.iter()),
        Data::Enum(e) => Box::new(e.variants.iter().flat_map(|v| v.fields.iter())),
        Data::Union(_) => Box::new(std::iter::empty()),
    }
}

/// The pattern that binds `fields` to `__f0..`, and the statements that
/// write them.
fn write_fields(
    fields: &syn::Fields,
    krate: &Path,
    direct: bool,
) -> syn::Result<(TokenStream2, TokenStream2)> {
    let mut names = Vec::new();
    let mut writes = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let name = syn::Ident::new(&format!("__f{i}"), proc_macro2::Span::call_site());
        writes.push(if through_serde(f, direct)? {
            quote!(__w.serde(#name)?;)
        } else {
            quote!(#krate::direct::DirectEncode::encode_direct(#name, __w)?;)
        });
        names.push(name);
    }
    let pattern = match fields {
        syn::Fields::Named(n) => {
            let idents = n.named.iter().map(|f| f.ident.as_ref().expect("named"));
            quote!({ #(#idents: #names),* })
        }
        syn::Fields::Unnamed(_) => quote!(( #(#names),* )),
        syn::Fields::Unit => quote!(),
    };
    Ok((pattern, quote!(#(#writes)*)))
}

/// `DirectEncode` for the type, and the `encode` that uses it.
fn direct_impl(
    input: &DeriveInput,
    krate: &Path,
    params: &[syn::Ident],
) -> syn::Result<TokenStream2> {
    let body = match &input.data {
        Data::Struct(s) => {
            let (pattern, writes) = write_fields(&s.fields, krate, true)?;
            quote! {
                let Self #pattern = self;
                #writes
                ::core::result::Result::Ok(())
            }
        }
        Data::Enum(e) => {
            let mut arms = Vec::new();
            for (i, v) in e.variants.iter().enumerate() {
                let index = u32::try_from(i).map_err(|_| {
                    syn::Error::new_spanned(&v.ident, "more variants than serde numbers")
                })?;
                let ident = &v.ident;
                let (pattern, writes) = write_fields(&v.fields, krate, true)?;
                arms.push(quote! {
                    Self::#ident #pattern => {
                        __w.variant(#index)?;
                        #writes
                    }
                });
            }
            if arms.is_empty() {
                // No value exists; `match self {}` on a reference would not
                // compile, and an `Ok` after it would be unreachable.
                quote!(match *self {})
            } else {
                quote! {
                    match self { #(#arms)* }
                    ::core::result::Result::Ok(())
                }
            }
        }
        Data::Union(_) => unreachable!("refused before"),
    };
    let mut generics = input.generics.clone();
    {
        let where_clause = generics.make_where_clause();
        for p in params {
            where_clause
                .predicates
                .push(syn::parse_quote!(#p: #krate::direct::DirectEncode));
        }
    }
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #krate::direct::DirectEncode for #ident #ty_generics #where_clause {
            #[inline]
            fn encode_direct(
                &self,
                __w: &mut #krate::direct::Writer<'_>,
            ) -> ::core::result::Result<(), #krate::SerializationError> {
                #body
            }
        }
    })
}

fn expand(mut input: DeriveInput) -> syn::Result<TokenStream2> {
    if let Data::Union(u) = &input.data {
        return Err(syn::Error::new(
            u.union_token.span,
            "RemoteMessage cannot be derived for a union: serde cannot encode one",
        ));
    }
    if let Data::Enum(e) = &input.data {
        local_only_last(e)?;
        e.variants.iter().try_for_each(no_variant_attrs)?;
    }
    let opts = options(&input)?;
    let krate: Path = opts.krate.unwrap_or_else(|| syn::parse_quote!(::actors));
    if opts.direct {
        direct_refusals(&input)?;
    } else {
        // `#[remote(serde)]` on a field without `direct` is a mistake.
        for f in all_fields(&input.data) {
            through_serde(f, false)?;
        }
    }
    let mut params = Vec::new();
    for p in &input.generics.params {
        match p {
            GenericParam::Type(t) => params.push(t.ident.clone()),
            GenericParam::Lifetime(l) => {
                return Err(syn::Error::new_spanned(
                    l,
                    "RemoteMessage cannot be derived for a type with a lifetime: \
                     a remote message is decoded into an owned value (serde's DeserializeOwned)",
                ));
            }
            GenericParam::Const(c) => {
                return Err(syn::Error::new_spanned(
                    c,
                    "RemoteMessage cannot be derived for a type with a const parameter: \
                     implement it by hand with a manifest per value",
                ));
            }
        }
    }
    let ident = &input.ident;
    let name = ident.to_string();
    let base = match &opts.manifest {
        Some(m) => quote!(#m),
        None => quote!(::core::concat!(::core::env!("CARGO_PKG_NAME"), ".", #name)),
    };
    let manifest = if params.is_empty() {
        base
    } else {
        // `base<P1,P2>`, built at compile time from the parameters'
        // manifests.
        let mut parts = vec![base, quote!("<")];
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                parts.push(quote!(","));
            }
            parts.push(quote!(<#p as #krate::RemoteMessage>::MANIFEST));
        }
        parts.push(quote!(">"));
        quote!(#krate::__private::ManifestBuf::concat(&[#(#parts),*]).as_str())
    };
    // `DirectEncode` asks its own bounds of the parameters, not
    // `RemoteMessage`'s: a direct type nested in another needs only that.
    let plain_generics = input.generics.clone();
    {
        let where_clause = input.generics.make_where_clause();
        for p in &params {
            where_clause
                .predicates
                .push(syn::parse_quote!(#p: #krate::RemoteMessage));
        }
        if opts.direct {
            for p in &params {
                where_clause
                    .predicates
                    .push(syn::parse_quote!(#p: #krate::direct::DirectEncode));
            }
        }
    }
    // Two types of one name in one package get one default manifest: the
    // runtime refuses the second one it sees (`DERIVED_MANIFEST`).
    let derived = opts.manifest.is_none();
    let (direct, encode) = if opts.direct {
        let mut plain = input.clone();
        plain.generics = plain_generics;
        (
            direct_impl(&plain, &krate, &params)?,
            quote! {
                #[inline]
                fn encode(
                    &self,
                    out: &mut #krate::__private::BytesMut,
                    limit: usize,
                ) -> ::core::result::Result<(), #krate::SerializationError> {
                    #krate::direct::encode(self, out, limit)
                }
            },
        )
    } else {
        (quote!(), quote!())
    };
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #krate::RemoteMessage for #ident #ty_generics #where_clause {
            const MANIFEST: &'static str = #manifest;
            const DERIVED_MANIFEST: bool = #derived;
            #encode
        }
        #direct
    })
}

#[cfg(test)]
mod tests {
    use super::expand;

    fn error(input: syn::DeriveInput) -> String {
        expand(input).expect_err("refused").to_string()
    }

    #[test]
    fn local_only_variants_must_come_last() {
        let err = error(syn::parse_quote! {
            enum M { A(u8), #[serde(skip)] Local(u8), B(u8) }
        });
        assert!(err.contains("`B` comes after the local-only"), "{err}");
        let err = error(syn::parse_quote! {
            enum M { #[serde(rename = "x", skip_deserializing)] Local, A }
        });
        assert!(err.contains("`A` comes after"), "{err}");
        // Last is fine, and so are other serde attributes.
        expand(syn::parse_quote! {
            enum M { #[serde(rename = "skip")] A(u8), #[serde(skip)] L1, #[serde(skip)] L2 }
        })
        .expect("local-only variants last");
    }

    #[test]
    fn refuses_what_cannot_be_a_remote_message() {
        assert!(
            error(syn::parse_quote!(
                struct R<'a>(&'a str);
            ))
            .contains("lifetime")
        );
        assert!(
            error(syn::parse_quote!(
                struct C<const N: usize>([u8; N]);
            ))
            .contains("const")
        );
        assert!(error(syn::parse_quote!(union U { a: u8 })).contains("union"));
        let err = error(syn::parse_quote!(
            #[remote(manifest = "")]
            struct E;
        ));
        assert!(err.contains("cannot be empty"), "{err}");
        let err = error(syn::parse_quote!(
            #[remote(name = "x")]
            struct E;
        ));
        assert!(
            err.contains("expected `manifest`, `crate` or `direct`"),
            "{err}"
        );
    }

    #[test]
    fn direct_refuses_what_it_cannot_follow() {
        let err = error(syn::parse_quote! {
            #[remote(direct)]
            enum M { A(#[serde(with = "x")] u8) }
        });
        assert!(err.contains("cannot follow"), "{err}");
        let err = error(syn::parse_quote! {
            #[remote(direct)]
            enum M { #[serde(rename = "b")] A(u8) }
        });
        assert!(err.contains("cannot follow"), "{err}");
        let err = error(syn::parse_quote! {
            #[remote(direct)]
            #[serde(tag = "t")]
            enum M { A { x: u8 } }
        });
        assert!(err.contains("`#[serde(tag ..)]`"), "{err}");
        let err = error(syn::parse_quote! {
            #[serde(transparent)]
            #[remote(direct)]
            struct M(u8);
        });
        assert!(err.contains("`#[serde(transparent ..)]`"), "{err}");
        let err = error(syn::parse_quote! {
            struct M(#[remote(serde)] u8);
        });
        assert!(err.contains("only means something with"), "{err}");
        let err = error(syn::parse_quote! {
            #[remote(direct)]
            struct M(#[remote(sered)] u8);
        });
        assert!(err.contains("expected `serde`"), "{err}");
        let err = error(syn::parse_quote! {
            enum M { #[remote(direct)] A }
        });
        assert!(err.contains("not on a variant"), "{err}");
        // Container attributes that do not change the bytes are fine.
        expand(syn::parse_quote! {
            #[remote(direct)]
            #[serde(rename_all = "snake_case", deny_unknown_fields)]
            enum M { A(#[remote(serde)] Vec<String>), B { x: u8 }, C }
        })
        .expect("direct");
    }

    #[test]
    fn direct_writes_variants_in_order_and_fields_by_kind() {
        let out = expand(syn::parse_quote! {
            #[remote(direct)]
            enum M { A, B(u8, #[remote(serde)] X), C { y: u16 } }
        })
        .expect("ok")
        .to_string();
        assert!(out.contains("DirectEncode for M"), "{out}");
        assert!(out.contains("__w . variant (0u32)"), "{out}");
        assert!(out.contains("__w . variant (2u32)"), "{out}");
        assert!(out.contains("__w . serde (__f1)"), "{out}");
        assert!(out.contains("fn encode"), "{out}");
        let generic = expand(syn::parse_quote! {
            #[remote(direct)]
            struct G<T>(T);
        })
        .expect("ok")
        .to_string();
        assert!(
            generic.contains("T : :: actors :: direct :: DirectEncode"),
            "{generic}"
        );
        let plain = expand(syn::parse_quote!(
            struct P(u8);
        ))
        .expect("ok")
        .to_string();
        assert!(!plain.contains("DirectEncode"), "{plain}");
    }

    #[test]
    fn manifests() {
        let plain = expand(syn::parse_quote!(
            struct P;
        ))
        .expect("ok")
        .to_string();
        assert!(plain.contains("CARGO_PKG_NAME"), "{plain}");
        let named = expand(syn::parse_quote!(
            #[remote(manifest = "svc.P")]
            struct P;
        ))
        .expect("ok")
        .to_string();
        assert!(named.contains("\"svc.P\""), "{named}");
        let generic = expand(syn::parse_quote!(
            struct G<T>(T);
        ))
        .expect("ok")
        .to_string();
        assert!(
            generic.contains("T : :: actors :: RemoteMessage"),
            "{generic}"
        );
        let renamed = expand(syn::parse_quote!(
            #[remote(crate = "my::actors")]
            struct P;
        ))
        .expect("ok")
        .to_string();
        assert!(
            renamed.contains("my :: actors :: RemoteMessage"),
            "{renamed}"
        );
    }
}
