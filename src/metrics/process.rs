//! `process_*`: the process's CPU, memory, file descriptors and threads, read on each
//! scrape (by `metrics-process`, as the Prometheus Go client reports them).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

#[derive(Debug)]
pub struct Process;

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: Option<u64>) -> std::fmt::Result {
    let Some(v) = v else { return Ok(()) };
    let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for Process {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let m = metrics_process::collector::collect();
        if let Some(cpu) = m.cpu_seconds_total {
            let c = ConstCounter::new(cpu);
            c.encode(e.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        gauge(
            &mut e,
            "process_open_fds",
            "Number of open file descriptors",
            m.open_fds,
        )?;
        gauge(
            &mut e,
            "process_max_fds",
            "Maximum number of open file descriptors",
            m.max_fds,
        )?;
        gauge(
            &mut e,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            m.virtual_memory_bytes,
        )?;
        gauge(
            &mut e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            m.resident_memory_bytes,
        )?;
        gauge(
            &mut e,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            m.start_time_seconds,
        )?;
        gauge(
            &mut e,
            "process_threads",
            "Number of OS threads in the process",
            m.threads,
        )?;
        Ok(())
    }
}
