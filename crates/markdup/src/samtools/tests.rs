//! Unit tests of the samtools markdup port.
