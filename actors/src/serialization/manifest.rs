//! Manifests, a message type's stable name on the wire: its 32-bit id
//! ([`manifest_id`]), the names of composite types built at compile time
//! ([`ManifestBuf`]) and the built-in impls of [`RemoteMessage`] named
//! with them, and `manifests`, the registry of the manifests this process
//! has seen, which catches two types that share a name or an id.

use super::RemoteMessage;

/// The 32-bit id of a manifest on the wire: FNV-1a of its name, so both
/// nodes derive the same id with no coordination.
pub const fn manifest_id(name: &str) -> u32 {
    let b = name.as_bytes();
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
}

/// The longest manifest a composite type ([`Vec<T>`], a derived generic
/// type, ...) can have: its name is built at compile time in a buffer of
/// this size, and a longer one is a compile error naming this limit.
/// Generous for any real nesting ("std.Result<std.Vec<svc.Item>,svc.Error>"
/// is 38 bytes).
pub const MAX_MANIFEST_LEN: usize = 256;

/// A manifest built at compile time from the manifests of its parts:
/// `const MANIFEST: &'static str` cannot be a `format!` of a generic
/// parameter's name, but it can be a slice of a constant buffer filled by
/// a `const fn`. Not an API: what the derive and this module's impls
/// expand to.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ManifestBuf {
    buf: [u8; MAX_MANIFEST_LEN],
    len: usize,
}

impl ManifestBuf {
    /// `parts`, concatenated.
    ///
    /// # Panics
    /// At compile time (it runs in a `const`): the result is longer than
    /// [`MAX_MANIFEST_LEN`].
    pub const fn concat(parts: &[&str]) -> Self {
        let mut buf = [0u8; MAX_MANIFEST_LEN];
        let mut len = 0;
        let mut i = 0;
        while i < parts.len() {
            let part = parts[i].as_bytes();
            let mut j = 0;
            while j < part.len() {
                assert!(
                    len < MAX_MANIFEST_LEN,
                    "a composite manifest is longer than actors::MAX_MANIFEST_LEN (256 bytes): \
                     give an inner type a shorter manifest"
                );
                buf[len] = part[j];
                len += 1;
                j += 1;
            }
            i += 1;
        }
        Self { buf, len }
    }

    /// The name built.
    pub const fn as_str(&self) -> &str {
        // Whole `&str`s were copied in, so the bytes are UTF-8.
        match std::str::from_utf8(self.buf.split_at(self.len).0) {
            Ok(s) => s,
            Err(_) => panic!("manifest parts are whole strings"),
        }
    }
}

macro_rules! builtin {
    ($($t:ty => $name:literal),* $(,)?) => {
        $(impl RemoteMessage for $t {
            const MANIFEST: &'static str = $name;
        })*
    };
}

// Common reply types, so `ask` can answer with them across nodes.
// `Vec<u8>` is a byte string ("std.bytes"): see the `Vec` impl below.
builtin! {
    () => "std.unit",
    bool => "std.bool",
    u8 => "std.u8",
    u16 => "std.u16",
    u32 => "std.u32",
    u64 => "std.u64",
    u128 => "std.u128",
    usize => "std.usize",
    i8 => "std.i8",
    i16 => "std.i16",
    i32 => "std.i32",
    i64 => "std.i64",
    i128 => "std.i128",
    isize => "std.isize",
    f32 => "std.f32",
    f64 => "std.f64",
    char => "std.char",
    String => "std.String",
}

/// Whether two strings are equal, in a `const` context.
const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A `Vec` of remote messages, named after them (`std.Vec<svc.Item>`),
/// except `Vec<u8>`: a byte string, "std.bytes" (one impl for both, as
/// `u8` is a remote message too).
impl<T: RemoteMessage> RemoteMessage for Vec<T> {
    const MANIFEST: &'static str = ManifestBuf::concat(&vec_parts(T::MANIFEST)).as_str();
}

/// The parts of the name of a `Vec` of messages named `inner`.
const fn vec_parts(inner: &'static str) -> [&'static str; 3] {
    if same_str(inner, <u8 as RemoteMessage>::MANIFEST) {
        ["std.bytes", "", ""]
    } else {
        ["std.Vec<", inner, ">"]
    }
}

/// Composite messages: `$t` with parameters `$p`, named
/// `$open P1,P2,.. $close` after the parameters' manifests.
macro_rules! composite {
    ($open:literal $close:literal, $t:ty, $($p:ident),+ $(; $($bound:tt)+)?) => {
        impl<$($p: RemoteMessage),+> RemoteMessage for $t $(where $($bound)+)? {
            const MANIFEST: &'static str =
                ManifestBuf::concat(&composite!(@parts $open $close; $($p),+)).as_str();
        }
    };
    (@parts $open:literal $close:literal; $first:ident $(, $rest:ident)*) => {
        [$open, $first::MANIFEST, $(",", $rest::MANIFEST,)* $close]
    };
}

// Replies (and messages) of any shape built from remote messages, without
// newtypes; their manifests follow the inner ones, so an
// `ActorRef<Vec<A>>` never takes a `Vec<B>`.
composite!("std.Option<" ">", Option<T>, T);
composite!("std.Result<" ">", Result<T, E>, T, E);
composite!("std.Box<" ">", Box<T>, T);
composite!("std.HashMap<" ">", std::collections::HashMap<K, V>, K, V; K: Eq + std::hash::Hash);
composite!("std.BTreeMap<" ">", std::collections::BTreeMap<K, V>, K, V; K: Ord);
composite!("(" ")", (A, B), A, B);
composite!("(" ")", (A, B, C), A, B, C);
composite!("(" ")", (A, B, C, D), A, B, C, D);

/// The manifests this process has seen a type use (by spawning an actor
/// that takes it, resolving or decoding a ref to one), by id: so that a
/// dead letter names its type, and so that two types whose names hash to
/// the same 32-bit id are caught when the second is registered instead of
/// decoding as each other.
pub(crate) mod manifests {
    use std::{
        any::TypeId,
        collections::HashMap,
        sync::{LazyLock, PoisonError, RwLock},
    };

    use super::{RemoteMessage, manifest_id};

    /// A manifest this process has seen, and the first type seen with it.
    #[derive(Clone, Copy)]
    struct Known {
        name: &'static str,
        ty: TypeId,
        type_name: &'static str,
        /// The derive's default name.
        derived: bool,
    }

    static KNOWN: LazyLock<RwLock<HashMap<u32, Known>>> = LazyLock::new(Default::default);

    /// Why a manifest was refused.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Conflict {
        /// Two manifest names with one id (`registered` has it).
        Id { id: u32, registered: &'static str },
        /// Two types with one manifest that the derive gave at least one
        /// of them by default: two types of one name in one package.
        SameName {
            registered_type: &'static str,
            this_type: &'static str,
        },
    }

    /// Registers `M`'s manifest; its id, or why it conflicts with a
    /// manifest registered before.
    pub(crate) fn register<M: RemoteMessage>() -> Result<u32, Conflict> {
        register_as(Known {
            name: M::MANIFEST,
            ty: TypeId::of::<M>(),
            type_name: std::any::type_name::<M>(),
            derived: M::DERIVED_MANIFEST,
        })
    }

    fn check(known: &Known, new: &Known) -> Result<u32, Conflict> {
        let id = manifest_id(new.name);
        if known.name != new.name {
            return Err(Conflict::Id {
                id,
                registered: known.name,
            });
        }
        if known.ty != new.ty && (known.derived || new.derived) {
            return Err(Conflict::SameName {
                registered_type: known.type_name,
                this_type: new.type_name,
            });
        }
        Ok(id)
    }

    /// Registers `name` for a type of no interest (tests of the id check).
    #[cfg(test)]
    pub(crate) fn register_name(name: &'static str) -> Result<u32, Conflict> {
        register_as(Known {
            name,
            ty: TypeId::of::<()>(),
            type_name: "()",
            derived: false,
        })
    }

    fn register_as(new: Known) -> Result<u32, Conflict> {
        let id = manifest_id(new.name);
        if let Some(known) = KNOWN
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            return check(known, &new);
        }
        let mut known = KNOWN.write().unwrap_or_else(PoisonError::into_inner);
        check(known.entry(id).or_insert(new), &new)
    }

    /// How a dead letter names a manifest id: its type's name if this
    /// process knows it, else the id.
    pub(crate) fn label(id: u32) -> String {
        match KNOWN
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            Some(known) => known.name.to_owned(),
            None => format!("unknown type (manifest {id:#010x})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_collisions_are_caught_and_ids_named() {
        // Two distinct names with one FNV-1a id (found by search).
        let (a, b) = collision_pair();
        assert_eq!(manifest_id(a), manifest_id(b));
        assert_eq!(manifests::register_name(a), Ok(manifest_id(a)));
        assert_eq!(
            manifests::register_name(a),
            Ok(manifest_id(a)),
            "again is fine"
        );
        assert_eq!(
            manifests::register_name(b),
            Err(manifests::Conflict::Id {
                id: manifest_id(a),
                registered: a
            })
        );
        assert_eq!(manifests::label(manifest_id(a)), a);
        assert!(manifests::label(0x0bad_f00d).contains("0x0badf00d"));
    }

    mod one {
        /// A type named like `two::Twin`, with the derive's default manifest.
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        pub(super) struct Twin;
    }

    mod two {
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        pub(super) struct Twin(u8);

        /// Names its manifest itself, like `one::Twin`'s default.
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        #[remote(manifest = "remoting-actors.Twin")]
        pub(super) struct Chosen;
    }

    /// Written by hand with the same manifest as another hand-written
    /// type: allowed (versions of one message, say).
    #[derive(serde::Serialize, serde::Deserialize)]
    struct VersionOne;
    impl RemoteMessage for VersionOne {
        const MANIFEST: &'static str = "test.Versioned";
    }
    #[derive(serde::Serialize, serde::Deserialize)]
    struct VersionTwo(u8);
    impl RemoteMessage for VersionTwo {
        const MANIFEST: &'static str = "test.Versioned";
    }

    #[test]
    fn two_types_with_one_derived_manifest_are_refused_naming_both() {
        assert_eq!(one::Twin::MANIFEST, two::Twin::MANIFEST);
        let id = manifest_id(one::Twin::MANIFEST);
        assert_eq!(manifests::register::<one::Twin>(), Ok(id));
        assert_eq!(manifests::register::<one::Twin>(), Ok(id), "again is fine");
        let refused = manifests::Conflict::SameName {
            registered_type: std::any::type_name::<one::Twin>(),
            this_type: std::any::type_name::<two::Twin>(),
        };
        assert_eq!(manifests::register::<two::Twin>(), Err(refused));
        // A manifest written out that equals a derived default: refused
        // too, since the derived one did not choose it.
        assert!(matches!(
            manifests::register::<two::Chosen>(),
            Err(manifests::Conflict::SameName { .. })
        ));
        // Two written out: the author's choice.
        assert!(manifests::register::<VersionOne>().is_ok());
        assert!(manifests::register::<VersionTwo>().is_ok());
    }

    /// Two names `t<i>` with the same manifest id.
    fn collision_pair() -> (&'static str, &'static str) {
        let mut seen = std::collections::HashMap::new();
        for i in 0u64.. {
            let name = format!("collide.{i}");
            let id = manifest_id(&name);
            if let Some(other) = seen.insert(id, name.clone()) {
                return (
                    Box::leak(other.into_boxed_str()),
                    Box::leak(name.into_boxed_str()),
                );
            }
        }
        unreachable!()
    }

    #[test]
    fn composite_manifests_follow_their_parts() {
        use std::collections::{BTreeMap, HashMap};
        assert_eq!(<Vec<String>>::MANIFEST, "std.Vec<std.String>");
        assert_eq!(<Vec<u8>>::MANIFEST, "std.bytes", "bytes stay bytes");
        assert_eq!(<u8>::MANIFEST, "std.u8");
        assert_eq!(<Option<u8>>::MANIFEST, "std.Option<std.u8>");
        assert_eq!(<Vec<Vec<u8>>>::MANIFEST, "std.Vec<std.bytes>");
        assert_eq!(<Option<String>>::MANIFEST, "std.Option<std.String>");
        assert_eq!(
            <Result<Vec<u64>, String>>::MANIFEST,
            "std.Result<std.Vec<std.u64>,std.String>"
        );
        assert_eq!(<(u32, bool)>::MANIFEST, "(std.u32,std.bool)");
        assert_eq!(
            <(u32, bool, (), char)>::MANIFEST,
            "(std.u32,std.bool,std.unit,std.char)"
        );
        assert_eq!(
            <HashMap<String, i32>>::MANIFEST,
            "std.HashMap<std.String,std.i32>"
        );
        assert_eq!(
            <BTreeMap<u16, Box<f32>>>::MANIFEST,
            "std.BTreeMap<std.u16,std.Box<std.f32>>"
        );
        assert_ne!(
            manifest_id(<Vec<u32>>::MANIFEST),
            manifest_id(<Vec<u64>>::MANIFEST)
        );
        // The id is a compile-time constant whatever the nesting: a ref
        // computes it once, as for any other type.
        const ID: u32 = manifest_id(<Option<Vec<String>>>::MANIFEST);
        assert_eq!(ID, manifest_id("std.Option<std.Vec<std.String>>"));
    }

    #[test]
    fn manifest_buf_concatenates_up_to_its_limit() {
        let long = "x".repeat(MAX_MANIFEST_LEN - 2);
        assert_eq!(
            ManifestBuf::concat(&["<", &long, ">"]).as_str().len(),
            MAX_MANIFEST_LEN
        );
        let over = std::panic::catch_unwind(|| ManifestBuf::concat(&["<", &long, ">>"]));
        assert!(over.is_err(), "one byte over the limit is refused");
    }

    #[test]
    fn derived_manifests() {
        use crate::RemoteMessage as _;
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        struct Plain(u8);
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        #[remote(manifest = "svc.Named")]
        enum Named {
            A,
        }
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        struct Pair<K, V> {
            k: K,
            v: Vec<V>,
        }
        #[derive(serde::Serialize, serde::Deserialize, crate::RemoteMessage)]
        #[remote(manifest = "svc.Wrap")]
        struct Wrap<T>(T);
        assert_eq!(Plain::MANIFEST, "remoting-actors.Plain");
        assert_eq!(Named::MANIFEST, "svc.Named");
        assert_eq!(
            <Pair<String, Named>>::MANIFEST,
            "remoting-actors.Pair<std.String,svc.Named>"
        );
        assert_eq!(
            <Wrap<Option<Plain>>>::MANIFEST,
            "svc.Wrap<std.Option<remoting-actors.Plain>>"
        );
        let _ = (Plain(0), Named::A, Wrap(()), Pair { k: (), v: vec![()] });
    }

    #[test]
    fn manifest_ids_are_stable() {
        assert_eq!(manifest_id(""), 0x811c_9dc5);
        assert_eq!(manifest_id("a"), 0xe40c_292c);
        assert_ne!(manifest_id("bench.Payload"), manifest_id("bench.Marker"));
    }
}
