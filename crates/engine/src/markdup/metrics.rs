//! Picard's DuplicationMetrics text and the metrics file it goes to.

use crate::error::{Context, Error, Result};
use alnsort_markdup::MetricsReport;
use std::path::PathBuf;
/// The `--metrics` file: created before the input is read (a bad path costs
/// no sort), written and renamed into place after the output.
/// The text [`MetricsFile::write`] writes to `path` (see there).
pub fn metrics_text(
    metrics: &MetricsReport,
    path: &std::path::Path,
    inputs: &[String],
    output: Option<&std::path::Path>,
    command_line: &str,
) -> String {
    let output = output.unwrap_or(std::path::Path::new("-"));
    let picard = alnsort_markdup::PicardCommandLine::new(inputs, output, path);
    metrics.to_text_with_command(&picard, command_line)
}

pub struct MetricsFile {
    pending: crate::io::cleanup::PendingFile,
    file: std::fs::File,
    path: PathBuf,
}

impl MetricsFile {
    pub fn create(
        path: &std::path::Path,
        debris: &crate::io::cleanup::Debris,
    ) -> Result<MetricsFile> {
        let (pending, file) =
            crate::io::cleanup::PendingFile::create(path, debris).with_context(|| {
                format!(
                    "--metrics {}: cannot create the metrics file",
                    path.display()
                )
            })?;
        Ok(MetricsFile {
            pending,
            file,
            path: path.to_path_buf(),
        })
    }

    /// Writes Picard's DuplicationMetrics text and renames the file into
    /// place. Its comment lines are Picard's own first line (`MarkDuplicates
    /// INPUT=[...] OUTPUT=... METRICS_FILE=...`, from which MultiQC names
    /// the sample after the input, as for Picard's metrics) and then
    /// alnsort's command line, where Picard writes its start time.
    /// `inputs` and `output` are the paths as the user gave them (`None`:
    /// standard output).
    pub fn write(
        self,
        metrics: &MetricsReport,
        inputs: &[String],
        output: Option<&std::path::Path>,
        command_line: &str,
    ) -> Result<()> {
        let text = metrics_text(metrics, &self.path, inputs, output, command_line);
        self.write_text(&text)
    }

    /// [`MetricsFile::write`] with Picard's first line as given (`alnsort
    /// MarkDuplicates` renders the options its user gave in it).
    pub fn write_picard(
        self,
        metrics: &MetricsReport,
        picard: &alnsort_markdup::PicardCommandLine,
        command_line: &str,
    ) -> Result<()> {
        let text = metrics.to_text_with_command(picard, command_line);
        self.write_text(&text)
    }

    fn write_text(mut self, text: &str) -> Result<()> {
        use std::io::Write as _;
        let fail = |e: std::io::Error| {
            Error::context(
                format!(
                    "the sort finished and its output is complete, but writing the metrics to {} failed",
                    self.path.display()
                ),
                e,
            )
        };
        self.file.write_all(text.as_bytes()).map_err(fail)?;
        if !self.pending.is_direct() {
            self.file.sync_all().map_err(fail)?;
        }
        drop(self.file);
        self.pending.commit().map_err(fail)
    }
}
