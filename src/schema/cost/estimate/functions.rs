//! The cost of a function call: cel-go's own estimates of the functions whose cost
//! depends on their arguments' sizes, after the Kubernetes library's
//! (`library.CostEstimator.EstimateCallCost`), which come first.

use super::{Est, Estimator, Node, union_entries};
use crate::schema::cost::types::K;
use cel::common::ast::{CallExpr, IdedExpr};

const STRING_TRAVERSAL: f64 = 0.1;
const REGEX_LENGTH: f64 = 0.25;

impl<'a> Estimator<'a> {
    /// A function's own cost (its arguments' included) and its result's size.
    pub(super) fn function(
        &mut self,
        e: &IdedExpr,
        c: &CallExpr,
        target: Option<&Node<'a>>,
        args: &[Node<'a>],
        costs: &[Est],
    ) -> (Est, Option<Est>) {
        let arg_sum = costs.iter().fold(Est::default(), |s, c| s.add(*c));
        if let Some((cost, size)) = self.library(&c.func_name, target, args) {
            return (cost.add(arg_sum), size);
        }
        let size = |n: &Node<'_>| n.computed.unwrap_or(Est::UNKNOWN);
        let name = c.func_name.as_str();
        let kind0 = args.first().map(|a| a.ty.kind());
        match (name, target, args.len()) {
            ("format", Some(t), _) => (size(t).factor(STRING_TRAVERSAL).add(arg_sum), None),
            ("bytes", None, 1) if kind0 == Some(K::String) => {
                let sz = size(&args[0]);
                let r = Est {
                    min: sz.min,
                    max: sz.max.saturating_mul(4),
                };
                (sz.factor(STRING_TRAVERSAL).add(arg_sum), Some(r))
            }
            ("string", None, 1) if kind0 == Some(K::Bytes) => {
                let sz = size(&args[0]);
                let r = Est {
                    min: sz.min / 4,
                    max: sz.max,
                };
                (sz.factor(STRING_TRAVERSAL).add(arg_sum), Some(r))
            }
            ("strings.quote", None, 1) => {
                let sz = size(&args[0]);
                let r = Est {
                    min: sz.min.saturating_add(2),
                    max: sz.max.saturating_mul(2).saturating_add(2),
                };
                (sz.factor(STRING_TRAVERSAL).add(arg_sum), Some(r))
            }
            ("startsWith" | "endsWith", Some(_), 1) => {
                (size(&args[0]).factor(STRING_TRAVERSAL).add(arg_sum), None)
            }
            ("@in", None, 2) if args[1].ty.kind() != K::Map => {
                (size(&args[1]).factor(1.0).add(arg_sum), None)
            }
            ("matches", Some(t), 1) => {
                let s = size(t).add(Est::fixed(1)).factor(STRING_TRAVERSAL);
                let r = size(&args[0]).factor(REGEX_LENGTH);
                (s.mul(r).add(arg_sum), None)
            }
            ("contains", Some(t), 1) if t.ty.kind() != K::List => {
                let s = size(t).factor(STRING_TRAVERSAL);
                let sub = size(&args[0]).factor(STRING_TRAVERSAL);
                (s.mul(sub).add(arg_sum), None)
            }
            ("_&&_" | "_||_", None, 2) => (
                Est {
                    min: costs[0].min,
                    max: costs[0].add(costs[1]).max,
                },
                None,
            ),
            ("_?_:_", None, 3) => {
                let r = size(&args[1]).union(size(&args[2]));
                let en = union_entries(self.entry(&c.args[1]), self.entry(&c.args[2]));
                if let Some(en) = en {
                    self.entries.insert(e.id, en);
                }
                (costs[0].add(costs[1].union(costs[2])), Some(r))
            }
            ("_+_", None, 2) if matches!(kind0, Some(K::String | K::Bytes | K::List)) => {
                let r = size(&args[0]).add(size(&args[1]));
                let en = union_entries(self.entry(&c.args[0]), self.entry(&c.args[1]));
                if let Some(en) = en {
                    self.entries.insert(e.id, en);
                }
                match kind0 {
                    Some(K::List) => (Est::fixed(1).add(arg_sum), Some(r)),
                    _ => (r.factor(STRING_TRAVERSAL).add(arg_sum), Some(r)),
                }
            }
            ("_<_" | "_>_" | "_<=_" | "_>=_", None, 2)
                if matches!(kind0, Some(K::String | K::Bytes)) =>
            {
                (compare(size(&args[0]), size(&args[1])).add(arg_sum), None)
            }
            ("_==_" | "_!=_", None, 2) => {
                (compare(size(&args[0]), size(&args[1])).add(arg_sum), None)
            }
            ("sets.contains" | "sets.intersects" | "sets.equivalent", None, 2) => {
                let f = if name == "sets.equivalent" { 2.0 } else { 1.0 };
                let c = self
                    .size_estimate(&args[0])
                    .mul(self.size_estimate(&args[1]));
                (c.factor(f).add(Est::fixed(1)).add(arg_sum), None)
            }
            _ => (Est::fixed(1).add(arg_sum), None),
        }
    }

    /// The Kubernetes library's estimates (`library.CostEstimator.EstimateCallCost`),
    /// before cel-go's own.
    fn library(
        &mut self,
        name: &str,
        target: Option<&Node<'a>>,
        args: &[Node<'a>],
    ) -> Option<(Est, Option<Est>)> {
        let traversal = |s: Est| s.factor(STRING_TRAVERSAL);
        match name {
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
                let t = target?;
                let sz = self.size_estimate(t);
                if t.ty.kind() == K::List {
                    let el = self.items_node(t);
                    let mut el_cost = Est::fixed(1);
                    if matches!(el.ty.kind(), K::String | K::Bytes) {
                        el_cost = el_cost.add(traversal(self.size_estimate(&el)));
                    }
                    Some((sz.mul(el_cost), None))
                } else {
                    Some((traversal(sz), None))
                }
            }
            "url" | "jsonpatch.escapeKey" if args.len() == 1 => {
                let sz = self.size_estimate(&args[0]);
                Some((traversal(sz), Some(sz)))
            }
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let sz = self.size_estimate(target?);
                Some((traversal(sz), Some(sz)))
            }
            "replace" if target.is_some() && args.len() >= 2 => {
                let sz = self.size_estimate(target?);
                let r = replaced(
                    sz,
                    self.size_estimate(&args[0]),
                    self.size_estimate(&args[1]),
                );
                Some((sz.factor(2.0 * STRING_TRAVERSAL), Some(r)))
            }
            "split" => {
                let sz = self.size_estimate(target?);
                let max = match args.get(1).and_then(|a| a.literal_int) {
                    Some(i) => i as u64,
                    None => sz.max,
                };
                Some((sz.factor(2.0 * STRING_TRAVERSAL), Some(Est { min: 0, max })))
            }
            "join" => {
                let t = target?;
                let list = self.size_estimate(t);
                let mut sz = Est::default();
                if t.ty.kind() == K::List {
                    let el = self.items_node(t);
                    sz = list.mul(self.size_estimate(&el));
                }
                if let Some(sep) = args.first() {
                    let seps = Est {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    sz = sz.add(self.size_estimate(sep).mul(seps));
                }
                Some((traversal(sz), Some(sz)))
            }
            "find" | "findAll" if target.is_some() && !args.is_empty() => {
                let sz = self.size_estimate(target?);
                let s = traversal(sz.add(Est::fixed(1)));
                let r = self.size_estimate(&args[0]).factor(REGEX_LENGTH);
                Some((
                    s.mul(r),
                    Some(Est {
                        min: 0,
                        max: sz.max,
                    }),
                ))
            }
            _ => self.library_net(name, target, args),
        }
    }

    /// The library's estimates of its network, quantity, semver, format and URL
    /// functions (see [`Self::library`]).
    fn library_net(
        &mut self,
        name: &str,
        target: Option<&Node<'a>>,
        args: &[Node<'a>],
    ) -> Option<(Est, Option<Est>)> {
        let one = Some((Est::fixed(1), None));
        let traversal = |s: Est| s.factor(STRING_TRAVERSAL);
        match name {
            "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" | "semver" | "isSemver"
                if !args.is_empty() =>
            {
                Some((traversal(self.size_estimate(&args[0])), None))
            }
            "ip" if !args.is_empty() => Some((traversal(self.size_estimate(&args[0])), None)),
            "ip" => one,
            "ip.isCanonical" if !args.is_empty() => Some((
                self.size_estimate(&args[0]).factor(2.0 * STRING_TRAVERSAL),
                None,
            )),
            "containsIP" | "containsCIDR" if target.is_some() && !args.is_empty() => {
                let ip = Est { min: 4, max: 16 };
                let mut c = traversal(ip.add(ip));
                if name == "containsCIDR" {
                    c = c.add(traversal(ip)).add(Est::fixed(1));
                }
                if args[0].ty.kind() == K::String {
                    c = c.add(traversal(self.size_estimate(&args[0])));
                }
                Some((c, None))
            }
            "validate" if target.is_some() && !args.is_empty() => {
                // `MaxNameFormatRegexSize` (128) regular-expression characters.
                let s = traversal(self.size_estimate(&args[0]));
                Some((s.factor(128.0 * REGEX_LENGTH), None))
            }
            "masked"
            | "prefixLength"
            | "family"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "isGlobalUnicast"
            | "format.named"
            | "sign"
            | "asInteger"
            | "isInteger"
            | "asApproximateFloat"
            | "isGreaterThan"
            | "isLessThan"
            | "compareTo"
            | "add"
            | "sub"
            | "major"
            | "minor"
            | "patch"
            | "getScheme"
            | "getHostname"
            | "getHost"
            | "getPort"
            | "getEscapedPath"
            | "getQuery" => one,
            "_==_" if args.len() == 2 && args[0].ty.kind() == K::Opaque => one,
            _ => None,
        }
    }

    /// A list's items as a node of their own (`listElementNode`).
    fn items_node(&self, list: &Node<'a>) -> Node<'a> {
        let mut path = list.path.clone();
        if !path.is_empty() {
            path.push("@items".into());
        }
        Node {
            path,
            ty: list.ty.elem(),
            computed: None,
            literal_int: None,
        }
    }

    /// The library's `sizeEstimate`: computed, else from the schema, else unknown.
    fn size_estimate(&mut self, n: &Node<'a>) -> Est {
        n.computed
            .or_else(|| self.schema_size(&n.path))
            .unwrap_or(Est::UNKNOWN)
    }
}

/// The cost of comparing two strings or any two values (`Equals`, `LessString`...).
fn compare(lhs: Est, rhs: Est) -> Est {
    let smallest = lhs.max.min(rhs.max);
    let min = u64::from(smallest > 0);
    Est { min, max: smallest }.factor(STRING_TRAVERSAL)
}

/// The size of `replace`'s result (the library's bounds on how many replacements).
fn replaced(sz: Est, from: Est, with: Est) -> Est {
    let (mut count, mut kept) = (Est::default(), Est::default());
    if from.min == 0 {
        count.max = if sz.max < u64::MAX {
            sz.max + 1
        } else {
            sz.max
        };
        kept.max = sz.max;
    } else if with.max <= from.min {
        kept.max = sz.max;
    } else {
        count.max = (sz.max as f64 / from.min as f64).ceil() as u64;
    }
    if from.max == 0 {
        count.min = if sz.min < u64::MAX {
            sz.min + 1
        } else {
            sz.min
        };
        kept.min = sz.min;
    } else if from.max <= with.min {
        kept.min = sz.min;
    } else {
        count.min = (sz.min as f64 / from.max as f64).ceil() as u64;
    }
    count.mul(with).add(kept)
}
