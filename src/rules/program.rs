//! The compiled form of every template and expression of one rule: a minijinja
//! environment that owns the text templates, and the expressions compiled against it.
//! Compiled once when the rule is loaded; evaluated for every custom resource.

use minijinja::value::Value as JinjaValue;
use minijinja::{AutoEscape, Environment, Expression, UndefinedBehavior};
use std::sync::Arc;

/// Fuel for one evaluation: enough for any honest template, too little for a runaway loop.
pub const FUEL: u64 = 200_000;
/// How deep templates may recurse (macros, nested calls).
pub const RECURSION_LIMIT: usize = 64;
/// The most text one templated string may render to.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;
/// The largest child object a render may produce (as JSON); the API server's own limit
/// for an object is about 1.5 MiB.
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;

/// An expression of the rule, with where it stands (for errors).
#[derive(Debug, Clone)]
pub struct ExprRef {
    pub(crate) index: usize,
    /// Dotted path inside the rule, e.g. `children[0].template.spec.replicas`.
    pub at: Arc<str>,
    /// Its line in the rules file.
    pub line: usize,
    pub source: Arc<str>,
}

/// A text template of the rule (a string with `{{ }}` among other text).
#[derive(Debug, Clone)]
pub struct TextRef {
    pub(crate) name: Arc<str>,
    pub at: Arc<str>,
    /// Its line in the rules file.
    pub line: usize,
}

type Expressions<'env> = Vec<Expression<'env, 'static>>;

self_cell::self_cell!(
    struct Cell {
        owner: Environment<'static>,
        #[covariant]
        dependent: Expressions,
    }
);

/// The rule's environment and compiled expressions.
pub struct Program {
    cell: Cell,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("expressions", &self.cell.borrow_dependent().len())
            .finish()
    }
}

/// The environment every rule uses: no HTML escaping, undefined values are errors except
/// in tests and conditions, bounded fuel and recursion.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION_LIMIT);
    // `namespace()` is Jinja's way to carry values across loop iterations (and so to grow
    // a string without bound in a few instructions). Templates see `namespace` as the
    // custom resource's namespace instead.
    env.remove_global("namespace");
    // `none` inside text would print as `none` (`x{{ none }}y` is `xnoney`): a value
    // missing where text expected one, which nobody means. A lone `{{ expr }}` is not text
    // (its `none` drops the field), so this is about text only.
    env.set_formatter(|out, state, value| {
        if value.is_none() {
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "a value inside text is none; write `{{ x | default('') }}` for nothing, or make the whole field a lone `{{ x }}` (then none drops the field)",
            ));
        }
        minijinja::escape_formatter(out, state, value)
    });
    super::helpers::add_to(&mut env);
    env
}

impl Program {
    /// Compiles `expressions` against `env` (which already holds the text templates).
    /// On failure, gives the index of the expression that failed and the error.
    pub fn new(
        env: Environment<'static>,
        expressions: &[Arc<str>],
    ) -> Result<Program, (usize, minijinja::Error)> {
        let cell = Cell::try_new(env, |env| {
            expressions
                .iter()
                .enumerate()
                .map(|(i, src)| {
                    env.compile_expression_owned(src.to_string())
                        .map_err(|e| (i, e))
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        Ok(Program { cell })
    }

    /// Evaluates an expression with `ctx` as its variables.
    pub fn eval(&self, e: &ExprRef, ctx: &JinjaValue) -> Result<JinjaValue, minijinja::Error> {
        let expr = self.cell.borrow_dependent().get(e.index).ok_or_else(|| {
            minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, "unknown expression")
        })?;
        expr.eval(ctx.clone())
    }

    /// Renders a text template with `ctx` as its variables, bounded in size.
    pub fn render(&self, t: &TextRef, ctx: &JinjaValue) -> Result<String, minijinja::Error> {
        let out = self
            .cell
            .borrow_owner()
            .get_template(&t.name)?
            .render(ctx)?;
        if out.len() > MAX_TEXT_BYTES {
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!(
                    "rendered text is {} bytes, more than the {MAX_TEXT_BYTES} allowed",
                    out.len()
                ),
            ));
        }
        Ok(out)
    }

    /// What an expression reads from its context: variable names, or with `nested` their
    /// dotted paths (`spec.replicas`) as far as they are static.
    fn expression_reads(&self, e: &ExprRef, nested: bool) -> Vec<String> {
        self.cell
            .borrow_dependent()
            .get(e.index)
            .map(|x| x.undeclared_variables(nested).into_iter().collect())
            .unwrap_or_default()
    }

    /// What a text template reads from its context (as [`Program::expression_reads`]).
    fn template_reads(&self, t: &TextRef, nested: bool) -> Vec<String> {
        self.cell
            .borrow_owner()
            .get_template(&t.name)
            .map(|x| x.undeclared_variables(nested).into_iter().collect())
            .unwrap_or_default()
    }

    /// Variables an expression reads that are not in its context (for load-time checks).
    pub fn expression_variables(&self, e: &ExprRef) -> Vec<String> {
        self.expression_reads(e, false)
    }

    /// The dotted paths an expression reads (`spec.replicas`), as far as they are static.
    pub fn expression_paths(&self, e: &ExprRef) -> Vec<String> {
        self.expression_reads(e, true)
    }

    /// The dotted paths a text template reads.
    pub fn template_paths(&self, t: &TextRef) -> Vec<String> {
        self.template_reads(t, true)
    }

    /// Variables a text template reads that are not in its context.
    pub fn template_variables(&self, t: &TextRef) -> Vec<String> {
        self.template_reads(t, false)
    }
}

/// The most objects one resource may render.
pub const MAX_OBJECTS: usize = 2000;
/// The most bytes of objects (as JSON) one resource may render, all together: with
/// `--concurrency` reconciles at once, this bounds what renders hold (256 × 4 MiB).
pub const MAX_RENDER_BYTES: usize = 4 * 1024 * 1024;
/// The most templates and expressions evaluated for one resource's render (each one on
/// its own fuel, [`FUEL`]).
pub const MAX_EVALUATIONS: u64 = 500_000;
