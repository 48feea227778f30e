//! Renders a rule's children in the order of their graph: each child after the ones it
//! reads or comes `after`, and only once they are there. A child whose inputs are not
//! there yet (another child not made or not ready, a live field not filled in, an
//! existing object missing) waits, and says what for; the children that read it wait too.

use super::budget;
use super::context::Scope;
use super::model::{HASH_ANNOTATION, Item, RenderError, Rendered, check_distinct};
use super::object::{item_context, items_of, render_child};
use super::readiness;
use crate::rules::{CompiledChild, CompiledRule};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// A child that waits, and what for.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub id: String,
    pub reason: String,
}

/// What one render gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The objects to apply, in graph order.
    pub children: Vec<Rendered>,
    /// The children that wait (in graph order): their objects are neither applied nor pruned.
    pub waiting: Vec<Waiting>,
}

/// Where each child got to in this render.
#[derive(Clone)]
enum Done {
    /// Its objects, as indexes into the rendered list (none: `when` false, or no items).
    Objects(Vec<usize>),
    Waiting,
}

/// One render walk: the objects so far, and the live ones looked up (once each).
struct Walk<'a> {
    rule: &'a CompiledRule,
    scope: &'a Scope,
    live: &'a dyn Fn(&Rendered) -> Option<Value>,
    /// A dependency counts only once its live object is the one rendered now (its applied
    /// hash): in the cluster, where ruleop wrote it; not offline, where live objects come
    /// from files.
    as_applied: bool,
    /// What this render has spent of its budget.
    meter: budget::Metered,
    out: Vec<Rendered>,
    seen: HashMap<usize, Option<Value>>,
    done: Vec<Option<Done>>,
}

/// Renders every child of `rule` for the resource of `scope`. `live` gives the object in
/// the cluster of a rendered child (None: not there), taken as it is (offline: the
/// observed objects of a file).
pub fn render_with(
    rule: &CompiledRule,
    scope: &Scope,
    live: &dyn Fn(&Rendered) -> Option<Value>,
) -> Result<Plan, RenderError> {
    walk(rule, scope, live, false)
}

/// As [`render_with`], in the cluster: a child that reads another (`after`, `observed`)
/// waits until the other's live object is the one rendered now (it carries this render's
/// hash), so that when both change in one edit, the reader sees the new one, not the old.
pub fn render_applied(
    rule: &CompiledRule,
    scope: &Scope,
    live: &dyn Fn(&Rendered) -> Option<Value>,
) -> Result<Plan, RenderError> {
    walk(rule, scope, live, true)
}

fn walk(
    rule: &CompiledRule,
    scope: &Scope,
    live: &dyn Fn(&Rendered) -> Option<Value>,
    as_applied: bool,
) -> Result<Plan, RenderError> {
    let mut walk = Walk {
        meter: budget::metered(),
        rule,
        scope,
        live,
        as_applied,
        out: Vec::with_capacity(rule.children.len()),
        seen: HashMap::new(),
        done: vec![None; rule.children.len()],
    };
    let mut waiting = Vec::new();
    for &i in &rule.order {
        let child = &rule.children[i];
        if walk.excluded(child) {
            // `when` is false: nothing to make, nothing to wait for.
            walk.done[i] = Some(Done::Objects(Vec::new()));
            continue;
        }
        let result = match walk.gate(child) {
            Some(reason) => Err(reason),
            None => match walk.objects(child) {
                Err(RenderError::Unobserved { what, .. }) => {
                    Err(format!("waits for `{what}` (not in the cluster yet)"))
                }
                other => Ok(other?),
            },
        };
        walk.done[i] = Some(match result {
            Ok(objects) => {
                let start = walk.out.len();
                walk.out.extend(objects);
                Done::Objects((start..walk.out.len()).collect())
            }
            Err(reason) => {
                waiting.push(Waiting {
                    id: child.id.clone(),
                    reason,
                });
                Done::Waiting
            }
        });
    }
    check_distinct(&walk.out)?;
    Ok(Plan {
        children: walk.out,
        waiting,
    })
}

impl Walk<'_> {
    fn live_of(&mut self, x: usize) -> Option<Value> {
        let live = self.live;
        let r = &self.out[x];
        self.seen.entry(x).or_insert_with(|| live(r)).clone()
    }

    fn describe(&self, x: usize) -> String {
        let r = &self.out[x];
        format!("child `{}` ({} {})", r.instance(), r.kind, r.name)
    }

    /// Whether the `when` of a single child is false before anything is waited for (a
    /// condition that reads other children or existing objects is decided after the gate:
    /// read while they are missing, it would say false and prune the child).
    fn excluded(&self, child: &CompiledChild) -> bool {
        let (Some(w), None, false) = (&child.when, &child.each, child.when_reads_graph) else {
            return false;
        };
        // It reads no other child: the resource's own variables decide it.
        self.rule
            .program
            .eval(w, &self.scope.ctx)
            .is_ok_and(|v| !v.is_true())
    }

    /// Why `child` cannot be rendered yet, if it cannot.
    fn gate(&mut self, child: &CompiledChild) -> Option<String> {
        for &(e, ref what) in &self.scope.missing {
            if child.reads.existing.contains(&e) {
                return Some(format!("waits for {what}"));
            }
        }
        let needs = child
            .after
            .iter()
            .chain(&child.reads.observed)
            .chain(&child.reads.rendered);
        for &d in needs {
            let id = &self.rule.children[d].id;
            let objects = match &self.done[d] {
                Some(Done::Objects(o)) => o.clone(),
                _ => return Some(format!("waits for child `{id}`, which waits itself")),
            };
            let must_exist = child.after.contains(&d) || child.reads.observed.contains(&d);
            for x in objects.into_iter().filter(|_| must_exist) {
                let Some(live) = self.live_of(x) else {
                    return Some(format!("waits for {} to be created", self.describe(x)));
                };
                let applied = live
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(HASH_ANNOTATION))
                    .and_then(Value::as_str);
                if self.as_applied && applied != Some(self.out[x].hash.as_str()) {
                    return Some(format!(
                        "waits for {} to be applied (the object in the cluster is not yet the one rendered now)",
                        self.describe(x)
                    ));
                }
                if child.after.contains(&d) {
                    let item = self.out[x].item.as_ref();
                    let dep = &self.rule.children[d];
                    if let Err(why) =
                        readiness::child_ready(self.rule, dep, self.scope, &live, item)
                    {
                        return Some(format!("waits for {}: {why}", self.describe(x)));
                    }
                }
            }
        }
        None
    }

    /// The variables of `child`: the scope's, and the children it reads.
    fn context(&mut self, child: &CompiledChild) -> minijinja::Value {
        if child.reads.rendered.is_empty() && child.reads.observed.is_empty() {
            return self.scope.ctx.clone();
        }
        let mut rendered = Map::new();
        let mut observed = Map::new();
        for &d in &child.reads.rendered {
            rendered.insert(self.rule.children[d].id.clone(), self.value_of(d, false));
        }
        for &d in &child.reads.observed {
            observed.insert(self.rule.children[d].id.clone(), self.value_of(d, true));
        }
        let vars = std::collections::BTreeMap::from([
            (
                "rendered",
                minijinja::Value::from(minijinja::value::Serde(&rendered)),
            ),
            (
                "observed",
                minijinja::Value::from(minijinja::value::Serde(&observed)),
            ),
        ]);
        minijinja::value::merge_maps([minijinja::Value::from(vars), self.scope.ctx.clone()])
    }

    /// Child `d` as its readers see it: its object (none when not made), or for a
    /// collection the list of its objects; rendered, or `live`.
    fn value_of(&mut self, d: usize, live: bool) -> Value {
        let objects = match &self.done[d] {
            Some(Done::Objects(o)) => o.clone(),
            _ => Vec::new(),
        };
        let mut values: Vec<Value> = objects
            .into_iter()
            .filter_map(|x| {
                if live {
                    self.live_of(x)
                } else {
                    Some(self.out[x].object.clone())
                }
            })
            .collect();
        if self.rule.children[d].each.is_some() {
            Value::Array(values)
        } else {
            values.pop().unwrap_or(Value::Null)
        }
    }

    /// The objects of `child`: one, none (`when` false), or one per item.
    fn objects(&mut self, child: &CompiledChild) -> Result<Vec<Rendered>, RenderError> {
        let ctx = self.context(child);
        let Some(each) = &child.each else {
            let one = render_child(self.rule, child, self.scope, &ctx, None)?;
            if let Some(o) = &one {
                self.meter.object(o.size)?;
            }
            return Ok(one.into_iter().collect());
        };
        let items = items_of(self.rule, &each.over, &ctx).map_err(|reason| RenderError::Eval {
            at: format!("{}:{}", self.rule.at.file.display(), each.over.line),
            child: child.id.clone(),
            field: "forEach".into(),
            reason,
        })?;
        let mut out = Vec::with_capacity(items.len());
        for (index, value) in items.into_iter().enumerate() {
            let item = Item {
                index,
                value: serde_json::to_value(&value).unwrap_or(Value::Null),
            };
            let ctx = item_context(&ctx, &each.var, index, value);
            let one = render_child(self.rule, child, self.scope, &ctx, Some(item))?;
            if let Some(o) = &one {
                self.meter.object(o.size)?;
            }
            out.extend(one);
        }
        Ok(out)
    }
}
