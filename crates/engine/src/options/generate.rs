//! The man page and shell completions (`alnsort generate man|bash|zsh|fish`),
//! rendered from the same option tables the parsers and `--help` read
//! ([`options::OPTIONS`], [`merge::MERGE_OPTIONS`],
//! [`crate::options::stage::STAGE_OPTIONS`]), so an option added to a table appears in all
//! of them. The output carries no date, so a build renders the same bytes.

use crate::options::merge::MERGE_OPTIONS;
use crate::options::sort::{OPTIONS, SORT_USAGE};
use crate::options::table::{OptSpec, OptionId, OptionName};

/// One option as the documents show it: what the man page and the
/// completions need of a row, and no more. Not a second [`OptSpec`]: the
/// documents list the rows of four tables of three shapes, `OptSpec<Id>`
/// over three id types (`alnsort sort`'s, `alnsort merge`'s, the stage
/// subcommands') and Picard's `PicardOpt` (short names of several
/// letters, no group, an action where the others have an id), so each row
/// is taken into this one plain form ([`OptDoc::of`], `markduplicates`)
/// and the renderers read that. The tables stay the one place an option
/// is described; this is built from them on each `alnsort generate`.
#[derive(Debug, Clone)]
pub struct OptDoc {
    pub short: Option<char>,
    pub long: Option<&'static str>,
    /// The value's name; `None` for a flag.
    pub value: Option<&'static str>,
    pub help: &'static str,
    /// False for options the command refuses (listed in the man page as
    /// not supported yet, left out of the completions).
    pub supported: bool,
}

/// One subcommand: its name, one line on what it does, its usage line and
/// its options.
#[derive(Debug, Clone)]
pub struct CommandDoc {
    pub name: &'static str,
    pub summary: &'static str,
    pub usage: String,
    pub options: Vec<OptDoc>,
}

impl OptDoc {
    /// An option of one of the engine's tables (`alnsort sort`'s,
    /// `alnsort merge`'s).
    pub(crate) fn of<Id: OptionId>(spec: &OptSpec<Id>) -> OptDoc {
        OptDoc {
            short: spec.short,
            long: spec.long,
            value: spec.value,
            help: spec.help,
            supported: spec.id.refused().is_none(),
        }
    }
}

/// `sort`, `merge` and `index`, from the engine's tables.
pub fn engine_commands() -> Vec<CommandDoc> {
    let sort = CommandDoc {
        name: "sort",
        summary: "Sort SAM, BAM or CRAM as samtools sort 1.24 does; --markdup marks \
                  duplicates as Picard MarkDuplicates 3.4.0 in the same pass (--markdup=samtools: \
                  as samtools collate, fixmate -m, sort and markdup 1.24 together).",
        usage: SORT_USAGE.trim_start_matches("Usage: ").to_string(),
        options: OPTIONS.iter().map(OptDoc::of).collect(),
    };
    let merge = CommandDoc {
        name: "merge",
        summary: "Merge sorted SAM, BAM or CRAM inputs as samtools merge 1.24 does.",
        usage: "alnsort merge [options] -o <out.bam|out.cram> <in1> ... <inN>".to_string(),
        options: MERGE_OPTIONS.iter().map(OptDoc::of).collect(),
    };
    vec![
        sort,
        merge,
        index(),
        fixmate(),
        samtools_markdup(),
        markduplicates(),
        verify(),
    ]
}

/// `index` as the man page and completions show it, from its table
/// ([`crate::options::index::INDEX_OPTIONS`]).
fn index() -> CommandDoc {
    CommandDoc {
        name: "index",
        summary: "Index BAM (BAI, CSI) and CRAM (.crai) files as samtools index 1.24 does, \
                  the same index bytes.",
        usage: "alnsort index [-bc] [-m INT] [-@ INT] <in.bam> [out.index]".to_string(),
        options: crate::options::index::INDEX_OPTIONS
            .iter()
            .map(OptDoc::of)
            .collect(),
    }
}

/// The command's entry for the man page and completions.
fn fixmate() -> CommandDoc {
    CommandDoc {
        name: "fixmate",
        summary: "Fill in mate information of name-grouped SAM, BAM or CRAM as samtools \
                  fixmate 1.24 does.",
        usage: crate::options::fixmate::FIXMATE_USAGE
            .trim_start_matches("Usage: ")
            .to_string(),
        options: crate::options::fixmate::FIXMATE_OPTIONS
            .iter()
            .map(OptDoc::of)
            .collect(),
    }
}

/// `verify` as the man page and completions show it, from its table
/// ([`crate::options::verify::VERIFY_OPTIONS`]).
fn verify() -> CommandDoc {
    CommandDoc {
        name: "verify",
        summary: "Say whether a SAM, BAM or CRAM file is sorted in the order its header \
                  claims (or the order options name), naming the first record out of order.",
        usage: "alnsort verify [options] <in.bam|in.sam|in.cram>...".to_string(),
        options: crate::options::verify::VERIFY_OPTIONS
            .iter()
            .map(OptDoc::of)
            .collect(),
    }
}

/// `markdup` as the man page and completions show it
/// from its table ([`crate::options::samtools_markdup::MARKDUP_OPTIONS`]).
fn samtools_markdup() -> crate::options::generate::CommandDoc {
    crate::options::generate::CommandDoc {
        name: "markdup",
        summary:
            "Mark duplicates in coordinate-sorted, fixmate'd input as samtools markdup 1.24 does \
                  (flags, tags, statistics), streaming.",
        usage: "alnsort markdup [options] <input.bam> <output.bam>".to_string(),
        options: crate::options::samtools_markdup::MARKDUP_OPTIONS
            .iter()
            .map(crate::options::generate::OptDoc::of)
            .collect(),
    }
}

/// `MarkDuplicates`, from Picard's option table
/// ([`crate::options::picard::PICARD_OPTIONS`]): each option by its long name (and a
/// one-letter short name where Picard has one); those refused whatever
/// their value are not supported.
fn markduplicates() -> CommandDoc {
    use crate::options::picard::{Action, PICARD_OPTIONS};
    CommandDoc {
        name: "MarkDuplicates",
        summary: "Mark duplicates with Picard MarkDuplicates' command line (I=in.bam \
                  O=out.bam M=metrics.txt, or --INPUT ...), its flags and metrics, in the \
                  input's order, without a sort.",
        usage: crate::options::picard::MARKDUPLICATES_USAGE
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("Usage: ")
            .to_string(),
        options: PICARD_OPTIONS
            .iter()
            .map(|o| OptDoc {
                short: o
                    .short
                    .filter(|s| s.len() == 1)
                    .and_then(|s| s.chars().next()),
                long: Some(o.name),
                value: (!matches!(o.action, Action::Help | Action::Version)).then_some(o.value),
                help: o.help,
                supported: !matches!(o.action, Action::Refused(_)),
            })
            .collect(),
    }
}

/// The commands that take no options but `--help` (listed for completion).
const PLAIN_COMMANDS: [(&str, &str); 3] = [
    (
        "generate",
        "Print the man page or a shell completion script.",
    ),
    ("help", "Print the help of alnsort or of one command."),
    ("version", "Print the version."),
];

/// Roff text: backslashes escaped, a line starting with `.` or `'` guarded.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

impl OptionName for OptDoc {
    fn short(&self) -> Option<char> {
        self.short
    }
    fn long(&self) -> Option<&'static str> {
        self.long
    }
    fn value(&self) -> Option<&'static str> {
        self.value
    }
}

/// `alnsort generate man`: a man page (section 1) of every command.
pub fn man_page(commands: &[CommandDoc], version: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        ".TH ALNSORT 1 \"\" \"alnsort {}\" \"User Commands\"\n",
        roff(version)
    ));
    out.push_str(
        ".SH NAME\nalnsort \\- sort, merge and mark duplicates in SAM, BAM and CRAM files\n",
    );
    out.push_str(".SH SYNOPSIS\n");
    for c in commands {
        out.push_str(&format!(".B {}\n.br\n", roff(&c.usage)));
    }
    out.push_str(
        ".SH DESCRIPTION\n\
         alnsort sorts and merges SAM, BAM and CRAM files as samtools sort and \
         samtools merge 1.24 do (the same options, records identical to \
         samtools'), and marks duplicates with the flags and metrics of Picard \
         MarkDuplicates 3.4.0 in the sort's pass (\\fBalnsort sort \\-\\-markdup\\fR), \
         within one memory budget, in parallel.\n",
    );
    out.push_str(".SH COMMANDS\n");
    for c in commands {
        out.push_str(&format!(".SS alnsort {}\n{}\n", c.name, roff(c.summary)));
        out.push_str(&format!(".PP\nUsage: \\fB{}\\fR\n", roff(&c.usage)));
        for supported in [true, false] {
            let opts: Vec<&OptDoc> = c
                .options
                .iter()
                .filter(|o| o.supported == supported)
                .collect();
            if opts.is_empty() {
                continue;
            }
            if !supported {
                out.push_str(".PP\nNot supported yet (refused with a message):\n");
            }
            for o in opts {
                out.push_str(&format!(
                    ".TP\n.B {}\n{}\n",
                    roff(o.synopsis().trim_start()),
                    roff(o.help)
                ));
            }
        }
    }
    for (name, summary) in PLAIN_COMMANDS {
        out.push_str(&format!(".SS alnsort {name}\n{}\n", roff(summary)));
    }
    out.push_str(
        ".SH EXIT STATUS\n\
         0 on success; 1 on an error (a message names the file, offset and \
         record); 2 for a usage error; 128 plus the signal number when \
         interrupted (temporary files and partial output removed).\n\
         .SH SEE ALSO\n\
         \\fBsamtools\\-sort\\fR(1), \\fBsamtools\\-merge\\fR(1); README.md, docs/ \
         and ARCHITECTURE.md in the alnsort source tree.\n",
    );
    out
}

fn words(commands: &[CommandDoc]) -> Vec<&'static str> {
    commands
        .iter()
        .map(|c| c.name)
        .chain(PLAIN_COMMANDS.iter().map(|(n, _)| *n))
        .collect()
}

fn option_words(c: &CommandDoc, valued: bool) -> Vec<String> {
    let mut w = Vec::new();
    for o in c.options.iter().filter(|o| o.supported) {
        // An optional value is attached with `=`, never the next word.
        if valued && (o.value.is_none() || o.optional_value()) {
            continue;
        }
        if let Some(s) = o.short {
            w.push(format!("-{s}"));
        }
        if let Some(l) = o.long {
            w.push(format!("--{l}"));
        }
    }
    w
}

/// Single-quoted for the shells (`'` closed, escaped, reopened).
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `alnsort generate bash`: completes the command, then its options; a
/// file name after an option that takes a value and for the inputs.
pub fn bash(commands: &[CommandDoc]) -> String {
    let mut out = String::from(
        "# bash completion for alnsort, generated by `alnsort generate bash`\n\
         _alnsort() {\n    \
         local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n    \
         if [[ $COMP_CWORD -eq 1 ]]; then\n        ",
    );
    out.push_str(&format!(
        "COMPREPLY=($(compgen -W {} -- \"$cur\"))\n        return\n    fi\n    \
         local opts valued\n    case \"${{COMP_WORDS[1]}}\" in\n",
        quote(&words(commands).join(" "))
    ));
    for c in commands {
        out.push_str(&format!(
            "        {})\n            opts={}\n            valued={} ;;\n",
            c.name,
            quote(&option_words(c, false).join(" ")),
            quote(&option_words(c, true).join(" "))
        ));
    }
    out.push_str(
        "        generate) COMPREPLY=($(compgen -W 'man bash zsh fish' -- \"$cur\")); return ;;\n        \
         help) COMPREPLY=($(compgen -W ",
    );
    out.push_str(&quote(&words(commands).join(" ")));
    out.push_str(
        " -- \"$cur\")); return ;;\n        \
         *) opts='--help' valued='' ;;\n    esac\n    \
         if [[ \" $valued \" == *\" $prev \"* ]]; then\n        \
         COMPREPLY=($(compgen -f -- \"$cur\"))\n    \
         elif [[ \"$cur\" == -* ]]; then\n        \
         COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n    \
         else\n        \
         COMPREPLY=($(compgen -f -- \"$cur\"))\n    \
         fi\n}\n\
         complete -o filenames -o bashdefault -F _alnsort alnsort\n",
    );
    out
}

/// `alnsort generate zsh`: the bash completion through zsh's
/// `bashcompinit` (the same words and rules as bash's). It works sourced
/// and autoloaded from `$fpath` as `_alnsort`: autoloaded, the file is the
/// body of the completion function zsh calls for the first TAB, so it
/// defines the bash function under another name, registers it for later
/// completions and completes the current one with it.
pub fn zsh(commands: &[CommandDoc]) -> String {
    let bash = bash(commands)
        .replace("_alnsort() {", "_alnsort_bash() {")
        .replace("-F _alnsort alnsort", "-F _alnsort_bash alnsort");
    format!(
        "#compdef alnsort\n# zsh completion for alnsort, generated by `alnsort generate zsh`: the\n\
         # bash completion, run by zsh's bashcompinit.\n\
         autoload -U +X bashcompinit && bashcompinit\n{bash}\
         # Autoloaded from $fpath this file is the body of _alnsort, called for\n\
         # the completion under way: complete it too.\n\
         if [[ ${{funcstack[1]}} == _alnsort ]]; then\n    \
         _bash_complete -o filenames -o bashdefault -F _alnsort_bash\n\
         fi\n"
    )
}

/// The first sentence of a help text, for a one-line description.
fn first_sentence(help: &str) -> String {
    let one = help.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.find(". ") {
        Some(i) => one[..=i].to_string(),
        None => one,
    }
}

/// `alnsort generate fish`: commands and options with their descriptions.
pub fn fish(commands: &[CommandDoc]) -> String {
    let mut out = String::from(
        "# fish completion for alnsort, generated by `alnsort generate fish`\n\
         complete -c alnsort -f\n",
    );
    let all = words(commands).join(" ");
    for c in commands {
        out.push_str(&format!(
            "complete -c alnsort -n 'not __fish_seen_subcommand_from {all}' -a {} -d {}\n",
            c.name,
            quote(&first_sentence(c.summary))
        ));
    }
    for (name, summary) in PLAIN_COMMANDS {
        out.push_str(&format!(
            "complete -c alnsort -n 'not __fish_seen_subcommand_from {all}' -a {name} -d {}\n",
            quote(summary)
        ));
    }
    out.push_str(
        "complete -c alnsort -n '__fish_seen_subcommand_from generate' -a 'man bash zsh fish'\n",
    );
    for c in commands {
        for o in c.options.iter().filter(|o| o.supported) {
            let mut line = format!(
                "complete -c alnsort -n '__fish_seen_subcommand_from {}'",
                c.name
            );
            if let Some(s) = o.short {
                line.push_str(&format!(" -s {}", quote(&s.to_string())));
            }
            if let Some(l) = o.long {
                line.push_str(&format!(" -l {l}"));
            }
            if o.optional_value() {
                // `--markdup[=picard|samtools]`: the choices after `=`.
                let choices = o.value.unwrap_or_default();
                let choices = choices.trim_start_matches("[=").trim_end_matches(']');
                line.push_str(&format!(" -a {}", quote(&choices.replace('|', " "))));
            } else if o.value.is_some() {
                line.push_str(" -r -F");
            }
            line.push_str(&format!(" -d {}\n", quote(&first_sentence(o.help))));
            out.push_str(&line);
        }
        // The inputs are files.
        out.push_str(&format!(
            "complete -c alnsort -n '__fish_seen_subcommand_from {}' -F\n",
            c.name
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_option_is_in_every_document() {
        let cmds = engine_commands();
        let man = man_page(&cmds, "0.1.0");
        let (b, z, f) = (bash(&cmds), zsh(&cmds), fish(&cmds));
        for c in &cmds {
            for o in &c.options {
                if let Some(l) = o.long {
                    assert!(
                        man.contains(&format!("\\-\\-{}", l.replace('-', "\\-"))),
                        "man lacks --{l}"
                    );
                    if o.supported {
                        for (what, text) in [("bash", &b), ("zsh", &z)] {
                            assert!(text.contains(&format!("--{l}")), "{what} lacks --{l}");
                        }
                        assert!(f.contains(&format!(" -l {l}")), "fish lacks --{l}");
                    } else {
                        let own = format!("__fish_seen_subcommand_from {}'", c.name);
                        let refused = format!(" -l {l} ");
                        assert!(
                            !f.lines()
                                .any(|ln| ln.contains(&own) && ln.contains(&refused)),
                            "fish completes {}'s refused --{l}",
                            c.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn roff_guards_control_characters() {
        assert_eq!(roff(".x a-b \\n"), "\\&.x a\\-b \\en");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(first_sentence("One two. Three."), "One two.");
    }
}
