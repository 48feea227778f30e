//! The estimated cost of one CEL expression, computed as the API server computes it when
//! it validates a CRD: a port of cel-go's `checker.Cost` (v0.26, the release Kubernetes
//! 1.36 builds with) with Kubernetes' size estimator and library costs
//! (k8s.io/apiserver/pkg/cel/library/cost.go). The checker's types are inferred here from
//! the schema, enough to pick the overloads whose cost depends on them (string against
//! integer comparison, list against map indexing and membership).

use super::decl::{Decl, Kind, Unbounded};
use super::types::{K, Ty};
use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use std::collections::{BTreeSet, HashMap};

mod functions;

const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
const STRUCT_CREATE: u64 = 40;

/// A range of sizes or costs, with arithmetic that stops at `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Est {
    pub min: u64,
    pub max: u64,
}

impl Est {
    pub const UNKNOWN: Est = Est {
        min: 0,
        max: u64::MAX,
    };

    pub fn fixed(n: u64) -> Est {
        Est { min: n, max: n }
    }

    pub fn add(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    pub fn mul(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    /// Times a cost factor, rounded up (`MultiplyByCostFactor`).
    pub fn factor(self, f: f64) -> Est {
        let one = |x: u64| {
            let v = (x as f64 * f).ceil();
            if v >= 18_446_744_073_709_551_616.0 {
                u64::MAX
            } else {
                v as u64
            }
        };
        Est {
            min: one(self.min),
            max: one(self.max),
        }
    }

    pub fn union(self, o: Est) -> Est {
        Est {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// The sizes of a list's or a map's entries.
#[derive(Debug, Clone, Copy)]
struct Entry {
    list: bool,
    key: Est,
    val: Est,
}

fn union_entries(a: Option<Entry>, b: Option<Entry>) -> Option<Entry> {
    let (a, b) = (a?, b?);
    Some(Entry {
        list: a.list,
        key: a.key.union(b.key),
        val: a.val.union(b.val),
    })
}

#[derive(Debug, Clone)]
struct Local<'a> {
    path: Vec<String>,
    size: Option<Est>,
    entry: Option<Entry>,
    ty: Ty<'a>,
}

/// What a function's estimator sees of an argument or target (cel-go's `AstNode`).
#[derive(Debug, Clone)]
struct Node<'a> {
    path: Vec<String>,
    ty: Ty<'a>,
    computed: Option<Est>,
    literal_int: Option<i64>,
}

/// Estimates one expression over a schema node's type.
pub(super) struct Estimator<'a> {
    root: &'a Decl,
    paths: HashMap<u64, Vec<String>>,
    sizes: HashMap<u64, Est>,
    entries: HashMap<u64, Entry>,
    types: HashMap<u64, Ty<'a>>,
    locals: HashMap<String, Vec<Local<'a>>>,
    /// The fields whose assumed size entered the estimate for want of a bound.
    pub unbounded: BTreeSet<Unbounded>,
}

impl<'a> Estimator<'a> {
    pub fn new(root: &'a Decl) -> Self {
        Estimator {
            root,
            paths: HashMap::new(),
            sizes: HashMap::new(),
            entries: HashMap::new(),
            types: HashMap::new(),
            locals: HashMap::new(),
            unbounded: BTreeSet::new(),
        }
    }

    /// The cost range of `e`.
    pub fn cost(&mut self, e: &IdedExpr) -> Est {
        let (cost, ty) = match &e.expr {
            Expr::Literal(l) => (Est::fixed(0), literal_type(l)),
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(s) => self.select(e.id, s),
            Expr::Call(c) => return self.call(e, c),
            Expr::List(l) => self.list(e.id, &l.elements),
            Expr::Map(m) => self.map(e.id, &m.entries),
            Expr::Struct(s) => {
                let mut sum = Est::fixed(STRUCT_CREATE);
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                (sum, Ty::Dyn)
            }
            Expr::Comprehension(c) => return self.comprehension(e, c),
            Expr::Unspecified => (Est::default(), Ty::Dyn),
        };
        self.types.insert(e.id, ty);
        cost
    }

    fn ident(&mut self, id: u64, name: &str) -> (Est, Ty<'a>) {
        let ty = match self.locals.get(name).and_then(|s| s.last()) {
            Some(v) => {
                self.paths.insert(id, v.path.clone());
                v.ty.clone()
            }
            None => {
                self.paths.insert(id, vec![name.to_string()]);
                match name {
                    "self" | "oldSelf" => Ty::Decl(self.root),
                    _ => Ty::Dyn,
                }
            }
        };
        (Est::fixed(1), ty)
    }

    fn select(&mut self, id: u64, s: &cel::common::ast::SelectExpr) -> (Est, Ty<'a>) {
        let operand = self.cost(&s.operand);
        if s.test {
            // Kubernetes counts a presence test as free (`PresenceTestHasCost(false)`).
            return (operand, Ty::Bool);
        }
        let on = self.ty(&s.operand);
        let mut sum = operand;
        if matches!(on.kind(), K::Map | K::Struct) {
            sum = sum.add(Est::fixed(1));
        }
        let mut path = self.path(&s.operand);
        path.push(s.field.clone());
        self.paths.insert(id, path);
        (sum, on.field(&s.field))
    }

    fn list(&mut self, id: u64, elements: &[IdedExpr]) -> (Est, Ty<'a>) {
        let mut sum = Est::default();
        let mut item = Est {
            min: if elements.is_empty() { 0 } else { u64::MAX },
            max: 0,
        };
        let mut ty = Ty::Dyn;
        for el in elements {
            sum = sum.add(self.cost(el));
            item = item.union(self.size_or_unknown(el));
            if matches!(ty, Ty::Dyn) {
                ty = self.ty(el);
            }
        }
        self.entries.insert(
            id,
            Entry {
                list: true,
                key: Est::fixed(1),
                val: item,
            },
        );
        (sum.add(Est::fixed(LIST_CREATE)), Ty::List(Box::new(ty)))
    }

    fn map(&mut self, id: u64, entries: &[cel::common::ast::IdedEntryExpr]) -> (Est, Ty<'a>) {
        let mut sum = Est::default();
        let empty = if entries.is_empty() { 0 } else { u64::MAX };
        let (mut key, mut val) = (Est { min: empty, max: 0 }, Est { min: empty, max: 0 });
        let mut ty = Ty::Dyn;
        for entry in entries {
            if let EntryExpr::MapEntry(m) = &entry.expr {
                sum = sum.add(self.cost(&m.key)).add(self.cost(&m.value));
                key = key.union(self.size_or_unknown(&m.key));
                val = val.union(self.size_or_unknown(&m.value));
                ty = self.ty(&m.value);
            }
        }
        self.entries.insert(
            id,
            Entry {
                list: false,
                key,
                val,
            },
        );
        let ty = Ty::Map(Box::new(Ty::String), Box::new(ty));
        (sum.add(Est::fixed(MAP_CREATE)), ty)
    }

    fn comprehension(&mut self, e: &IdedExpr, c: &ComprehensionExpr) -> Est {
        let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
        let accu_ty = self.ty(&c.accu_init);
        self.push_local(&c.accu_var, &c.accu_init, accu_ty);
        let range_ty = self.ty(&c.iter_range);
        let entry = self.entry(&c.iter_range);
        let list = match entry {
            Some(en) => en.list,
            None => range_ty.kind() == K::List,
        };
        let range_path = self.path(&c.iter_range);
        let with = |sub: &str| {
            let mut p = range_path.clone();
            p.push(sub.to_string());
            p
        };
        match &c.iter_var2 {
            Some(v2) => {
                let (kp, vp) = if list {
                    ("@indices", "@items")
                } else {
                    ("@keys", "@values")
                };
                let key_ty = if list { Ty::Int } else { range_ty.key() };
                self.push(&c.iter_var, with(kp), entry.map(|e| e.key), None, key_ty);
                self.push(v2, with(vp), entry.map(|e| e.val), None, range_ty.elem());
            }
            None => {
                let (sub, size, ty) = if list {
                    ("@items", entry.map(|e| e.val), range_ty.elem())
                } else {
                    ("@keys", entry.map(|e| e.key), range_ty.key())
                };
                self.push(&c.iter_var, with(sub), size, None, ty);
            }
        }
        let loop_cost = self.cost(&c.loop_cond);
        let step_cost = self.cost(&c.loop_step);
        let step_ty = self.ty(&c.loop_step);
        self.pop(&c.iter_var);
        if let Some(v2) = &c.iter_var2 {
            self.pop(v2);
        }
        if let Some(accu) = self.locals.get_mut(&c.accu_var).and_then(|s| s.last_mut())
            && !matches!(step_ty.kind(), K::Dyn)
        {
            accu.ty = step_ty;
        }
        sum = sum.add(self.cost(&c.result));
        let ty = self.ty(&c.result);
        self.pop(&c.accu_var);
        let range = self.size_or_unknown(&c.iter_range);
        sum = sum.add(range.mul(step_cost.add(loop_cost)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(s) = self.compute_size(&c.accu_init) {
                    self.sizes.insert(e.id, s);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(e.id, range);
                if let Some(en) = self.entry(&c.loop_step) {
                    self.entries.insert(e.id, en);
                }
            }
            _ => {}
        }
        self.types.insert(e.id, ty);
        sum
    }

    fn call(&mut self, e: &IdedExpr, c: &CallExpr) -> Est {
        if c.func_name == "dyn" && c.target.is_none() && c.args.len() == 1 {
            let arg = self.cost(&c.args[0]);
            self.copy_sizes(e.id, &c.args[0]);
            let ty = self.ty(&c.args[0]);
            self.types.insert(e.id, ty);
            return Est::fixed(1).add(arg);
        }
        if let Some(cost) = self.bind(e, c) {
            return cost;
        }
        let mut arg_costs = Vec::with_capacity(c.args.len());
        let mut args = Vec::with_capacity(c.args.len());
        for a in &c.args {
            arg_costs.push(self.cost(a));
            args.push(self.node(a));
        }
        let mut sum = Est::default();
        let target = c.target.as_deref().map(|t| {
            sum = sum.add(self.cost(t));
            self.node(t)
        });
        let arg_tys: Vec<Ty<'a>> = args.iter().map(|a| a.ty.clone()).collect();
        let ty = super::types::result(&c.func_name, target.as_ref().map(|t| &t.ty), &arg_tys);
        self.types.insert(e.id, ty);
        let (cost, mut size) = self.function(e, c, target.as_ref(), &args, &arg_costs);
        if c.func_name == "_[_]" && c.target.is_none() && c.args.len() == 2 {
            size = self.entry(&c.args[0]).map(|en| en.val);
            let sub = match args[0].ty.kind() {
                K::List => "@items",
                _ => "@values",
            };
            let mut path = self.path(&c.args[0]);
            path.push(sub.to_string());
            self.paths.insert(e.id, path);
        }
        let size = size.or_else(|| self.compute_size(e));
        if let Some(s) = size {
            self.sizes.insert(e.id, s);
        }
        sum.add(cost)
    }

    /// `cel.bind(name, init, result)`: the cost of its (empty) range, of `init` and of
    /// `result` with `name` bound.
    fn bind(&mut self, e: &IdedExpr, c: &CallExpr) -> Option<Est> {
        let target = c.target.as_deref()?;
        if c.func_name != "bind" || c.args.len() != 3 || target.expr != Expr::Ident("cel".into()) {
            return None;
        }
        let Expr::Ident(name) = &c.args[0].expr else {
            return None;
        };
        let mut sum = Est::fixed(LIST_CREATE).add(self.cost(&c.args[1]));
        let ty = self.ty(&c.args[1]);
        self.push_local(name, &c.args[1], ty);
        sum = sum.add(self.cost(&c.args[2]));
        self.pop(name);
        self.copy_sizes(e.id, &c.args[2]);
        let ty = self.ty(&c.args[2]);
        self.types.insert(e.id, ty);
        Some(sum)
    }

    fn node(&mut self, e: &IdedExpr) -> Node<'a> {
        let mut path = self.path(e);
        if path
            .first()
            .is_some_and(|p| p == "@result" || p == "__result__")
        {
            path.clear();
        }
        let literal_int = match &e.expr {
            Expr::Literal(LiteralValue::Int(i)) => Some(*i.inner()),
            _ => None,
        };
        Node {
            path,
            ty: self.ty(e),
            computed: self.compute_size(e),
            literal_int,
        }
    }

    fn ty(&self, e: &IdedExpr) -> Ty<'a> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(v) = self.locals.get(name).and_then(|s| s.last())
        {
            return v.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    fn entry(&self, e: &IdedExpr) -> Option<Entry> {
        if let Some(en) = self.entries.get(&e.id) {
            return Some(*en);
        }
        match &e.expr {
            Expr::Ident(name) => self.locals.get(name)?.last()?.entry,
            _ => None,
        }
    }

    fn push(
        &mut self,
        name: &str,
        path: Vec<String>,
        size: Option<Est>,
        entry: Option<Entry>,
        ty: Ty<'a>,
    ) {
        let local = Local {
            path,
            size,
            entry,
            ty,
        };
        self.locals.entry(name.to_string()).or_default().push(local);
    }

    fn push_local(&mut self, name: &str, e: &IdedExpr, ty: Ty<'a>) {
        let path = self.path(e);
        let entry = self.entry(e);
        let size = self.compute_size(e);
        self.push(name, path, size, entry, ty);
    }

    fn pop(&mut self, name: &str) {
        if let Some(s) = self.locals.get_mut(name) {
            s.pop();
        }
    }

    fn copy_sizes(&mut self, dst: u64, src: &IdedExpr) {
        if let Some(s) = self.compute_size(src) {
            self.sizes.insert(dst, s);
        }
        if let Some(en) = self.entry(src) {
            self.entries.insert(dst, en);
        }
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Est {
        self.compute_size(e).unwrap_or(Est::UNKNOWN)
    }

    /// `computeSize`: as computed, a literal's, the schema's, a scalar's 1, a variable's.
    fn compute_size(&mut self, e: &IdedExpr) -> Option<Est> {
        if let Some(s) = self.sizes.get(&e.id) {
            return Some(*s);
        }
        if let Some(s) = literal_size(&e.expr) {
            return Some(s);
        }
        let path = self.path(e);
        if let Some(s) = self.schema_size(&path) {
            self.sizes.insert(e.id, s);
            return Some(s);
        }
        if self.ty(e).is_scalar() {
            return Some(Est::fixed(1));
        }
        match &e.expr {
            Expr::Ident(name) => self.locals.get(name)?.last()?.size,
            _ => None,
        }
    }

    /// Kubernetes' size estimator: the node the path leads to from the rule's own node
    /// (its first step, the variable, left out), as large as its bound allows.
    fn schema_size(&mut self, path: &[String]) -> Option<Est> {
        if path.is_empty() {
            return None;
        }
        let mut node = self.root;
        let key = Decl::key();
        for step in &path[1..] {
            node = match step.as_str() {
                "@items" | "@values" => node.elem.as_deref()?,
                // A map's keys: a string the API server sizes as 0.
                "@keys" if node.kind == Kind::Map => return Some(Est::fixed(key.max_elements)),
                field => node.fields.get(field)?,
            };
        }
        if let Some(u) = &node.unbounded {
            self.unbounded.insert(u.clone());
        }
        Some(Est {
            min: 0,
            max: node.max_elements,
        })
    }
}

fn literal_size(e: &Expr) -> Option<Est> {
    let n = match e {
        Expr::Literal(LiteralValue::String(s)) => s.inner().chars().count() as u64,
        Expr::Literal(LiteralValue::Bytes(b)) => b.inner().len() as u64,
        Expr::Literal(_) => 1,
        Expr::List(l) => l.elements.len() as u64,
        Expr::Map(m) => m.entries.len() as u64,
        _ => return None,
    };
    Some(Est::fixed(n))
}

fn literal_type<'a>(l: &LiteralValue) -> Ty<'a> {
    match l {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(_) => Ty::Bytes,
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::Null => Ty::Null,
        LiteralValue::String(_) => Ty::String,
        LiteralValue::UInt(_) => Ty::Uint,
    }
}
