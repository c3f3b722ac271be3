//! The summed slots in the Prometheus text format, encoded by `prometheus-client`.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::bridge::Counters;

use super::layout::{
    ACCESS_DROPPED, BRIDGE, CONNECTIONS, DURATION, DURATION_BOUNDS_NS, DURATION_WORDS, GIL_WAIT,
    GIL_WAIT_BOUNDS_NS, GIL_WAIT_PHASES, GIL_WAIT_WORDS, PROTOCOLS, REQUESTS, STATUS_CLASSES,
    WEBSOCKETS,
};
use super::region::Totals;

/// A worker process as the parent sees it from `/proc`.
pub struct Process {
    pub pid: u32,
    pub rss_bytes: u64,
    pub open_fds: u64,
}

/// The restart reasons always reported, at 0 until one happens.
pub const RESTART_REASONS: [&str; 5] = [
    "crash",
    "max_requests",
    "max_rss",
    "lifetime",
    "health_check",
];

/// Encodes `totals`, the worker processes and the supervisor's restart counts.
pub fn encode(
    totals: &Totals,
    processes: &[Process],
    restarts: &[(String, u64)],
) -> Result<String, std::fmt::Error> {
    let words = &totals.words;
    let mut registry = Registry::with_prefix("ferrule");

    let requests = Family::<[(&str, &str); 2], Counter>::default();
    for (p, protocol) in PROTOCOLS.iter().enumerate() {
        for (c, class) in STATUS_CLASSES.iter().enumerate() {
            let value = words[REQUESTS + p * STATUS_CLASSES.len() + c];
            if value > 0 {
                requests
                    .get_or_create(&[("protocol", protocol), ("status", class)])
                    .inc_by(value);
            }
        }
    }
    registry.register(
        "requests",
        "Requests answered, by protocol and status class",
        requests,
    );

    let durations = (0..2)
        .map(|p| Series {
            label: PROTOCOLS[p],
            histogram: histogram(words, DURATION + p * DURATION_WORDS, &DURATION_BOUNDS_NS),
        })
        .collect();
    registry.register(
        "request_duration_seconds",
        "From the request head read to the app's coroutine finished (its response queued)",
        Histograms {
            label: "protocol",
            series: durations,
        },
    );

    let waits = GIL_WAIT_PHASES
        .iter()
        .enumerate()
        .map(|(i, phase)| Series {
            label: phase,
            histogram: histogram(words, GIL_WAIT + i * GIL_WAIT_WORDS, &GIL_WAIT_BOUNDS_NS),
        })
        .collect();
    registry.register(
        "gil_wait_seconds",
        "How long a ready coroutine waited for the GIL or the loop thread before it was driven \
         (start: a request's first drive; resume: a suspended coroutine made runnable)",
        Histograms {
            label: "phase",
            series: waits,
        },
    );

    let gauge = |value: u64| {
        let gauge = Gauge::<i64>::default();
        gauge.set(value as i64);
        gauge
    };
    registry.register(
        "connections_active",
        "Client connections open",
        gauge(words[CONNECTIONS]),
    );
    registry.register(
        "websockets_active",
        "WebSocket sessions whose app is running",
        gauge(words[WEBSOCKETS]),
    );

    let dropped = Counter::<u64>::default();
    dropped.inc_by(words[ACCESS_DROPPED]);
    registry.register(
        "access_log_lines_dropped",
        "Access lines dropped because standard output was not being read and \
         --access-log-buffer was full",
        dropped,
    );

    for (i, name) in Counters::NAMES.iter().enumerate() {
        let counter = Counter::<u64>::default();
        counter.inc_by(words[BRIDGE + i]);
        registry.register(
            format!("bridge_{name}"),
            format!("The coroutine bridge's {name} counter (docs/operations.md)"),
            counter,
        );
    }

    registry.register(
        "workers",
        "Worker processes serving",
        gauge(totals.pids.len() as u64),
    );
    let rss = Family::<[(&str, String); 1], Gauge>::default();
    let fds = Family::<[(&str, String); 1], Gauge>::default();
    for process in processes {
        let label = [("worker", process.pid.to_string())];
        rss.get_or_create(&label).set(process.rss_bytes as i64);
        fds.get_or_create(&label).set(process.open_fds as i64);
    }
    registry.register(
        "worker_resident_memory_bytes",
        "Resident memory of each worker process, labelled with its pid",
        rss,
    );
    registry.register(
        "worker_open_fds",
        "Open file descriptors of each worker process, labelled with its pid",
        fds,
    );

    let restarted = Family::<[(&str, String); 1], Counter>::default();
    for reason in RESTART_REASONS {
        let _ = restarted.get_or_create(&[("reason", reason.to_owned())]);
    }
    for (reason, count) in restarts {
        restarted
            .get_or_create(&[("reason", reason.clone())])
            .inc_by(*count);
    }
    registry.register(
        "worker_restarts",
        "Worker processes replaced, by reason",
        restarted,
    );

    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}

/// A histogram read from its words: non-cumulative bucket counts (`+Inf` last), sum, count.
#[derive(Debug)]
struct HistogramData {
    buckets: Vec<(f64, u64)>,
    sum_seconds: f64,
    count: u64,
}

fn histogram(words: &[u64], base: usize, bounds_ns: &[u64]) -> HistogramData {
    let seconds = |nanos: u64| nanos as f64 / 1e9;
    let mut buckets: Vec<(f64, u64)> = bounds_ns
        .iter()
        .enumerate()
        .map(|(i, &bound)| (seconds(bound), words[base + i]))
        .collect();
    buckets.push((f64::INFINITY, words[base + bounds_ns.len()]));
    HistogramData {
        buckets,
        sum_seconds: seconds(words[base + bounds_ns.len() + 1]),
        count: words[base + bounds_ns.len() + 2],
    }
}

#[derive(Debug)]
struct Series {
    label: &'static str,
    histogram: HistogramData,
}

/// Histograms read from the slots, one per value of one label. `prometheus-client`'s own
/// `Histogram` records observations itself; these are counted elsewhere, so they encode
/// through the encoder's histogram call directly.
#[derive(Debug)]
struct Histograms {
    label: &'static str,
    series: Vec<Series>,
}

impl EncodeMetric for Histograms {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for series in &self.series {
            let labels = [(self.label, series.label)];
            let h = &series.histogram;
            encoder
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &h.buckets, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::layout::SLOT_WORDS;

    #[test]
    fn encodes_counters_histograms_and_the_restart_reasons() {
        let mut words = vec![0; SLOT_WORDS];
        words[REQUESTS + 1] = 7; // http/1.1 2xx
        words[DURATION] = 7; // <= 50 us
        words[DURATION + DURATION_BOUNDS_NS.len() + 1] = 140_000;
        words[DURATION + DURATION_BOUNDS_NS.len() + 2] = 7;
        let totals = Totals {
            words,
            pids: vec![12],
        };
        let processes = [Process {
            pid: 12,
            rss_bytes: 4096,
            open_fds: 9,
        }];
        let text = encode(&totals, &processes, &[("crash".to_owned(), 2)]).unwrap();
        for line in [
            "# TYPE ferrule_requests_total counter",
            "ferrule_requests_total{protocol=\"http/1.1\",status=\"2xx\"} 7",
            "ferrule_request_duration_seconds_bucket{protocol=\"http/1.1\",le=\"5e-05\"} 7",
            "ferrule_request_duration_seconds_bucket{protocol=\"http/1.1\",le=\"+Inf\"} 7",
            "ferrule_request_duration_seconds_sum{protocol=\"http/1.1\"} 0.00014",
            "ferrule_request_duration_seconds_count{protocol=\"h2\"} 0",
            "ferrule_worker_resident_memory_bytes{worker=\"12\"} 4096",
            "ferrule_worker_restarts_total{reason=\"crash\"} 2",
            "ferrule_worker_restarts_total{reason=\"lifetime\"} 0",
            "ferrule_bridge_drives_total 0",
            "ferrule_workers 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }
}
