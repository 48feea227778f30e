//! The types the cost estimate needs: a value of the schema (its declared type) or one a
//! literal or a function makes, and the result types of the functions rules use.

use super::decl::{Decl, Kind};

/// The type of an expression, as far as the estimate needs it.
#[derive(Debug, Clone)]
pub(super) enum Ty<'a> {
    Decl(&'a Decl),
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    /// A Kubernetes library value (`quantity`, `url`, `ip`, `cidr`, `semver`, `format`).
    Opaque,
    List(Box<Ty<'a>>),
    Map(Box<Ty<'a>>, Box<Ty<'a>>),
    Dyn,
}

/// The kind of a type, as cel-go's cost estimate tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum K {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    Opaque,
    List,
    Map,
    Struct,
    Dyn,
}

impl<'a> Ty<'a> {
    pub fn kind(&self) -> K {
        match self {
            Ty::Decl(d) => match d.kind {
                Kind::Bool => K::Bool,
                Kind::Int => K::Int,
                Kind::Double => K::Double,
                Kind::String => K::String,
                Kind::Bytes => K::Bytes,
                Kind::Duration => K::Duration,
                Kind::Timestamp => K::Timestamp,
                Kind::List => K::List,
                Kind::Map => K::Map,
                Kind::Object => K::Struct,
                Kind::Dyn => K::Dyn,
            },
            Ty::Bool => K::Bool,
            Ty::Int => K::Int,
            Ty::Uint => K::Uint,
            Ty::Double => K::Double,
            Ty::String => K::String,
            Ty::Bytes => K::Bytes,
            Ty::Null => K::Null,
            Ty::Duration => K::Duration,
            Ty::Timestamp => K::Timestamp,
            Ty::Opaque => K::Opaque,
            Ty::List(_) => K::List,
            Ty::Map(..) => K::Map,
            Ty::Dyn => K::Dyn,
        }
    }

    /// Of a constant size (`isScalar`): strings, bytes and containers are not.
    pub fn is_scalar(&self) -> bool {
        matches!(
            self.kind(),
            K::Bool | K::Double | K::Duration | K::Int | K::Timestamp | K::Uint
        )
    }

    /// A list's items or a map's values.
    pub fn elem(&self) -> Ty<'a> {
        match self {
            Ty::Decl(d) => d.elem.as_deref().map_or(Ty::Dyn, Ty::Decl),
            Ty::List(t) | Ty::Map(_, t) => (**t).clone(),
            _ => Ty::Dyn,
        }
    }

    /// A map's keys (strings for every map of a schema).
    pub fn key(&self) -> Ty<'a> {
        match self {
            Ty::Map(k, _) => (**k).clone(),
            Ty::Decl(d) if d.kind == Kind::Map => Ty::String,
            _ => Ty::Dyn,
        }
    }

    /// The type of `.field` on this.
    pub fn field(&self, name: &str) -> Ty<'a> {
        match self {
            Ty::Decl(d) if d.kind == Kind::Object => d.fields.get(name).map_or(Ty::Dyn, Ty::Decl),
            Ty::Decl(d) if d.kind == Kind::Map => self.elem(),
            Ty::Map(_, v) => (**v).clone(),
            _ => Ty::Dyn,
        }
    }
}

/// The result type of `function` called on `target` with arguments of types `args`.
pub(super) fn result<'a>(function: &str, target: Option<&Ty<'a>>, args: &[Ty<'a>]) -> Ty<'a> {
    let arg = |i: usize| args.get(i).cloned().unwrap_or(Ty::Dyn);
    match function {
        "_==_"
        | "_!=_"
        | "_<_"
        | "_>_"
        | "_<=_"
        | "_>=_"
        | "_&&_"
        | "_||_"
        | "!_"
        | "@not_strictly_false"
        | "@in"
        | "matches"
        | "contains"
        | "startsWith"
        | "endsWith"
        | "sets.contains"
        | "sets.intersects"
        | "sets.equivalent"
        | "bool"
        | "validate"
        | "containsIP"
        | "containsCIDR"
        | "isGreaterThan"
        | "isLessThan" => Ty::Bool,
        f if f.starts_with("is") => Ty::Bool,
        "_+_" | "_-_" | "_*_" | "_/_" | "_%_" => match (arg(0), arg(1)) {
            (Ty::List(a), b) if matches!(*a, Ty::Dyn) && b.kind() == K::List => b,
            (a, _) => a,
        },
        "-_" => arg(0),
        "_?_:_" => match arg(1) {
            Ty::Dyn => arg(2),
            t => t,
        },
        "_[_]" => arg(0).field_or_item(),
        "size" | "int" | "indexOf" | "lastIndexOf" | "sign" | "compareTo" | "major" | "minor"
        | "patch" | "prefixLength" | "family" | "asInteger" => Ty::Int,
        "string"
        | "lowerAscii"
        | "upperAscii"
        | "trim"
        | "substring"
        | "replace"
        | "join"
        | "charAt"
        | "format"
        | "strings.quote"
        | "find"
        | "getScheme"
        | "getHostname"
        | "getHost"
        | "getPort"
        | "getEscapedPath"
        | "getQuery"
        | "jsonpatch.escapeKey"
        | "reverse"
            if target.is_none_or(|t| t.kind() != K::List) =>
        {
            Ty::String
        }
        "split" | "findAll" => Ty::List(Box::new(Ty::String)),
        "double" | "asApproximateFloat" => Ty::Double,
        "uint" => Ty::Uint,
        "bytes" => Ty::Bytes,
        "duration" => Ty::Duration,
        "timestamp" => Ty::Timestamp,
        "quantity" | "url" | "ip" | "cidr" | "semver" | "format.named" | "masked" | "add"
        | "sub" => Ty::Opaque,
        "sum" | "min" | "max" => target.map_or(Ty::Dyn, Ty::elem),
        "sort" | "distinct" | "reverse" | "slice" | "flatten" | "sortBy" => {
            target.cloned().unwrap_or(Ty::Dyn)
        }
        "dyn" => arg(0),
        _ => Ty::Dyn,
    }
}

impl<'a> Ty<'a> {
    /// What indexing this gives: a list's item, a map's value.
    fn field_or_item(&self) -> Ty<'a> {
        match self.kind() {
            K::List | K::Map => self.elem(),
            _ => Ty::Dyn,
        }
    }
}
