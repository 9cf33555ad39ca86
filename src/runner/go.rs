//! `go test`.
//!
//! Sources: "go help environment" and "go help modules" (`go.work` and
//! `go.work.sum` change which module code a test builds against;
//! `go.mod`'s `replace`, `toolchain` and `godebug` directives — `go.mod`
//! is judged as a shared file, its requirements free to change;
//! `vendor/modules.txt` switches the build to the vendored copies (the
//! vendored code itself is the repository's code, judged like the rest);
//! `GOFLAGS` from `go env -w` lives in the
//! user's config, under a HOME the judge does not share).

use super::{base, Runner};

pub const RUNNER: Runner = Runner {
    name: "go test",
    docs: &[
        "https://pkg.go.dev/cmd/go#hdr-Environment_variables",
        "https://go.dev/ref/mod#go-work-file",
        "https://go.dev/doc/toolchain",
    ],
    files: &[
        "**/go.work",
        "**/go.work.sum",
        "**/vendor/modules.txt",
        "**/go.env",
    ],
    vars: &[
        "GOFLAGS",
        "GOENV",
        "GOTOOLCHAIN",
        "GOWORK",
        "GOPATH",
        "GOROOT",
        "GOPROXY",
        "GOEXPERIMENT",
        "GODEBUG",
        "CGO_ENABLED",
        "CGO_CFLAGS",
        "CGO_LDFLAGS",
    ],
    runs,
    probe,
    whole,
    tests: super::default_tests,
};

fn runs(words: &[&str]) -> bool {
    words.first().is_some_and(|w| base(w) == "go") && words.get(1) == Some(&"test")
}

fn probe(words: &[&str]) -> Option<String> {
    Some(super::executable_probe(words.first()?))
}

/// What a `go test` command selects: packages other than `./...`,
/// `-run`/`-skip` patterns, and `-failfast` (the rest unrun). Without
/// them: the same flags over `./...`. What follows `-args` is the test
/// binary's, kept as it is.
fn whole(words: &[&str]) -> Option<super::Whole> {
    let args = words.get(2..)?;
    let (args, binary) = match args.iter().position(|w| *w == "-args" || *w == "--args") {
        Some(i) => args.split_at(i),
        None => (args, &[][..]),
    };
    const VALUE: &[&str] = &[
        "-count",
        "-timeout",
        "-tags",
        "-p",
        "-parallel",
        "-cpu",
        "-bench",
        "-benchtime",
        "-coverprofile",
        "-covermode",
        "-coverpkg",
        "-o",
        "-exec",
        "-vet",
        "-shuffle",
        "-C",
        "-ldflags",
        "-gcflags",
        "-mod",
        "-modfile",
        "-outputdir",
        "-fuzz",
        "-fuzztime",
    ];
    const SELECT: &[&str] = &["-failfast"];
    const SELECT_VALUE: &[&str] = &["-run", "-skip"];
    // `./...` is every package: not a selection.
    let everything = args.contains(&"./...");
    let rest: Vec<&str> = args.iter().copied().filter(|w| *w != "./...").collect();
    let (kept, selected) = super::drop_selection(&rest, VALUE, SELECT, SELECT_VALUE);
    if !selected && everything {
        return Some(super::Whole::All);
    }
    Some(super::Whole::Without(
        words[..2]
            .iter()
            .map(|w| (*w).to_owned())
            .chain(kept)
            .chain(std::iter::once("./...".to_owned()))
            .chain(binary.iter().map(|w| (*w).to_owned()))
            .collect(),
    ))
}
