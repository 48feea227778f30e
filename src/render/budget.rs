//! The budget of one resource's render: at most [`MAX_OBJECTS`] objects, [`MAX_RENDER_BYTES`]
//! bytes of them all together, [`MAX_EVALUATIONS`] templates and expressions evaluated, and
//! [`MAX_RENDER_TIME`] of rendering.
//! Each evaluation already runs on bounded fuel and each object is capped; this bounds
//! the whole, so that one custom resource (a thousand items, each copying a large field)
//! cannot take the memory or the time of every other resource, and of every rule.
//!
//! The evaluations are counted on the rendering thread: a render is one synchronous call,
//! and [`Metered`] is held for its length.

use super::model::RenderError;
use crate::rules::program::{MAX_EVALUATIONS, MAX_OBJECTS, MAX_RENDER_BYTES};
use std::cell::Cell;

/// The longest one resource's render may take: its evaluations stop there
/// (`RenderFailed`, past its budget). Renders take milliseconds; this bounds the CPU one
/// resource can take from the others, whatever its templates do within their fuel.
pub const MAX_RENDER_TIME: std::time::Duration = std::time::Duration::from_secs(10);

thread_local! {
    /// Evaluations so far in the render on this thread, if one is metered.
    static SPENT: Cell<Option<u64>> = const { Cell::new(None) };
    /// When the render metered on this thread must end.
    static DEADLINE: Cell<Option<std::time::Instant>> = const { Cell::new(None) };
}

/// Meters the evaluations of this thread while it lives.
pub struct Metered {
    objects: usize,
    bytes: usize,
}

/// Starts metering a render.
pub fn metered() -> Metered {
    metered_within(MAX_RENDER_TIME)
}

/// Starts metering a render that may take `time`.
fn metered_within(time: std::time::Duration) -> Metered {
    SPENT.with(|s| s.set(Some(0)));
    DEADLINE.with(|d| d.set(std::time::Instant::now().checked_add(time)));
    Metered {
        objects: 0,
        bytes: 0,
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        SPENT.with(|s| s.set(None));
        DEADLINE.with(|d| d.set(None));
    }
}

impl Metered {
    /// Counts one more object of `size` bytes.
    pub fn object(&mut self, size: usize) -> Result<(), RenderError> {
        self.objects += 1;
        self.bytes += size;
        if self.objects > MAX_OBJECTS {
            return Err(over(
                format!("{} objects", self.objects),
                MAX_OBJECTS.to_string(),
            ));
        }
        if self.bytes > MAX_RENDER_BYTES {
            return Err(over(
                format!("{} bytes of objects", self.bytes),
                format!("{MAX_RENDER_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

/// Counts one more evaluation (none is counted outside a metered render).
pub fn spend() -> Result<(), RenderError> {
    SPENT.with(|s| match s.get() {
        None => Ok(()),
        Some(n) if n >= MAX_EVALUATIONS => Err(over(
            format!("more than {n} evaluations"),
            format!("{MAX_EVALUATIONS} evaluations"),
        )),
        Some(n) => {
            s.set(Some(n + 1));
            let late = DEADLINE.with(|d| d.get().is_some_and(|t| std::time::Instant::now() > t));
            if late {
                return Err(over(
                    format!("{} s of rendering", MAX_RENDER_TIME.as_secs()),
                    format!("{} s", MAX_RENDER_TIME.as_secs()),
                ));
            }
            Ok(())
        }
    })
}

fn over(what: String, limit: String) -> RenderError {
    RenderError::Budget { what, limit }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_render_past_its_time_stops_at_its_next_evaluation() {
        let m = metered_within(std::time::Duration::ZERO);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let e = spend().unwrap_err().to_string();
        assert!(e.contains("s of rendering"), "{e}");
        drop(m);
        assert!(spend().is_ok(), "nothing metered outside a render");
    }

    use super::*;

    #[test]
    fn evaluations_are_counted_only_while_metered_and_stop_at_the_budget() {
        for _ in 0..10 {
            assert!(spend().is_ok(), "not metered: free");
        }
        let m = metered();
        for _ in 0..MAX_EVALUATIONS {
            assert!(spend().is_ok());
        }
        let e = spend().unwrap_err();
        assert!(e.to_string().contains("past its budget"), "{e}");
        drop(m);
        assert!(spend().is_ok(), "the next render starts afresh");
    }

    #[test]
    fn objects_and_bytes_are_bounded() {
        let mut m = metered();
        assert!(m.object(MAX_RENDER_BYTES).is_ok());
        let e = m.object(1).unwrap_err();
        assert!(e.to_string().contains("bytes of objects"), "{e}");
        let mut m = metered();
        for _ in 0..MAX_OBJECTS {
            m.object(1).unwrap();
        }
        assert!(m.object(1).is_err());
    }
}
