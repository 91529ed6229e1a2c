//! Latency samples and their percentiles.

use std::time::Duration;

/// Latencies of one kind of operation, in the order they were taken.
#[derive(Debug, Default, Clone)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn with_capacity(capacity: usize) -> Self {
        Samples(Vec::with_capacity(capacity))
    }

    pub fn push(&mut self, sample: Duration) {
        self.0.push(sample);
    }

    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Nearest-rank percentile (`p` in 0..=100), in microseconds.
    pub fn percentile_us(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        let index = rank.clamp(1, sorted.len()) - 1;
        sorted[index].as_secs_f64() * 1e6
    }

    pub fn p50(&self) -> f64 {
        self.percentile_us(50.0)
    }

    pub fn p99(&self) -> f64 {
        self.percentile_us(99.0)
    }

    pub fn max_us(&self) -> f64 {
        self.percentile_us(100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut samples = Samples::default();
        for micros in 1..=100 {
            samples.push(Duration::from_micros(micros));
        }
        assert_eq!(samples.p50(), 50.0);
        assert_eq!(samples.p99(), 99.0);
        assert_eq!(samples.max_us(), 100.0);
    }
}
