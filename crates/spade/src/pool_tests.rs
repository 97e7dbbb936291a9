//! Pool lines round-trip, every malformed line gets one message with its line, filters keep
//! their band (and the review filters theirs), file names stay inside the pool, the builder
//! names each file once, the card counts per skill.

use super::*;

fn entry(id: &str) -> PoolEntry {
    PoolEntry {
        id: id.into(),
        kind: EnvKind::Game,
        skill: "Logical Deduction".into(),
        code_file: Some(format!("{id}.py")),
        code: None,
        hint: Some("try".into()),
        win_rate_hint: Some(0.8),
        win_rate_no_hint: Some(0.3),
        regret: Some(0.5),
        designer_reward: Some(0.4),
        reward_levels: Some(2),
        parent_id: None,
        run: Some("7".into()),
        step: Some(4),
        status: EnvStatus::Accepted,
        reviews: vec![],
    }
}

#[test]
fn a_written_line_reads_back_the_same() {
    let e = entry("s4-game-0");
    let line = serde_json::to_string(&e).unwrap_or_default();
    let (got, problems) = parse_jsonl("pool.jsonl", &line);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(got, vec![(1, e)]);
}

#[test]
fn every_bad_line_gets_one_message_naming_its_line_and_the_rest_loads() {
    let good = serde_json::to_string(&entry("a")).unwrap_or_default();
    let mut no_skill = serde_json::to_value(entry("b")).unwrap_or_default();
    no_skill.as_object_mut().map(|o| o.remove("skill"));
    let mut bad_skill = entry("c");
    bad_skill.skill = "Juggling".into();
    let mut escape = entry("d");
    escape.code_file = Some("../../etc/passwd.py".into());
    let text = [
        good.clone(),
        "{not json".into(),
        no_skill.to_string(),
        serde_json::to_string(&bad_skill).unwrap_or_default(),
        String::new(),
        good,
        serde_json::to_string(&escape).unwrap_or_default(),
    ]
    .join("\n");
    let (got, problems) = parse_jsonl("pool.jsonl", &text);
    assert_eq!(got.len(), 1);
    let lines: Vec<Option<usize>> = problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![Some(2), Some(3), Some(4), Some(6), Some(7)]);
    let msgs: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        msgs[0].starts_with("pool.jsonl:2: expected one JSON object"),
        "{msgs:?}"
    );
    assert!(msgs[1].contains("missing field `skill`"), "{msgs:?}");
    assert!(
        msgs[2].contains("\"Juggling\" is not one of the spec's skills"),
        "{msgs:?}"
    );
    assert!(
        msgs[3].contains("duplicate id \"a\" (first on line 1)"),
        "{msgs:?}"
    );
    assert!(msgs[4].contains("must not contain `..`"), "{msgs:?}");
}

#[test]
fn an_entry_needs_exactly_one_code_source_and_a_skill_of_its_kind() {
    let mut e = entry("x");
    e.code = Some("pass".into());
    assert!(check_entry(&e)[0].contains("not both"));
    e.code = None;
    e.code_file = None;
    assert!(check_entry(&e)[0].contains("expected `code_file`"));
    let mut t = entry("y");
    t.kind = EnvKind::ToolUse;
    assert!(check_entry(&t)[0].contains("is a game skill but `kind` is tool_use"));
    for bad in ["/abs.py", "a//b.py", "x.txt", "C:x.py"] {
        let mut e = entry("z");
        e.code_file = Some(bad.into());
        assert_eq!(check_entry(&e).len(), 1, "{bad}");
    }
}

#[test]
fn the_filter_keeps_the_band_and_leaves_out_unscored_ones_when_bounded() {
    let e = entry("a");
    let mut unscored = entry("b");
    unscored.win_rate_no_hint = None;
    unscored.regret = None;
    let all = PoolFilter::default();
    assert!(all.matches(&e) && all.matches(&unscored));
    let band = PoolFilter {
        win_rate_min: Some(0.2),
        win_rate_max: Some(0.4),
        ..PoolFilter::default()
    };
    assert!(band.matches(&e) && !band.matches(&unscored));
    let high = PoolFilter {
        regret_min: Some(0.6),
        ..PoolFilter::default()
    };
    assert!(!high.matches(&e));
    let steps = PoolFilter {
        step_min: Some(5),
        ..PoolFilter::default()
    };
    assert!(!steps.matches(&e));
    let mut marked = entry("m");
    marked.reviews.push(PoolReview {
        verdict: Verdict::RewardHackable,
        comment: "any boxed answer wins".into(),
    });
    let unhacked = PoolFilter {
        without_verdicts: vec![Verdict::Broken, Verdict::RewardHackable],
        ..PoolFilter::default()
    };
    assert!(unhacked.matches(&e) && !unhacked.matches(&marked));
    assert!(
        unhacked
            .describe()
            .contains("no mark broken or reward_hackable")
    );
    let status = PoolFilter {
        status: Some(EnvStatus::Rejected),
        ..PoolFilter::default()
    };
    assert!(!status.matches(&e));
    assert!(
        PoolFilter {
            win_rate_min: Some(0.5),
            win_rate_max: Some(0.4),
            ..PoolFilter::default()
        }
        .check()
        .is_err_and(|m| m.contains("win_rate_min must not exceed"))
    );
}

#[test]
fn code_file_names_are_safe_and_unique() {
    let mut taken = HashSet::new();
    assert_eq!(code_file_name("s4/../x", &mut taken), "s4_.._x.py");
    assert_eq!(code_file_name("s4?.._x", &mut taken), "s4_.._x-2.py");
    assert_eq!(code_file_name("..", &mut taken), "_...py");
    assert_eq!(code_file_name("", &mut taken), "_.py");
}

#[test]
fn the_docstring_names_the_skill() {
    assert_eq!(
        skill_from_docstring("\"\"\"Skill: Optimization. Mechanic: x.\"\"\"\nclass A: pass"),
        Some("Optimization")
    );
    assert_eq!(skill_from_docstring("class A: pass"), None);
    assert_eq!(skill_from_docstring("\"\"\"Skill: Juggling. x\"\"\""), None);
}

#[test]
fn the_card_counts_per_skill_and_says_the_filters() {
    let mut card = Card {
        run: "run 7".into(),
        model: "tiny".into(),
        filter: PoolFilter {
            status: Some(EnvStatus::Accepted),
            ..PoolFilter::default()
        },
        ..Card::default()
    };
    card.count(&entry("a"));
    card.count(&entry("b"));
    let text = card.render();
    assert!(text.contains("- environments: 2"), "{text}");
    assert!(text.contains("| game | Logical Deduction | 2 |"), "{text}");
    assert!(text.contains("filters: status = accepted"), "{text}");
}

#[test]
fn the_review_filter_keeps_a_verdict_or_the_unreviewed_and_curated_means_good_only() {
    let mark = |v| PoolReview {
        verdict: v,
        comment: String::new(),
    };
    let none = entry("n");
    let mut good = entry("g");
    good.reviews = vec![mark(Verdict::Good)];
    let mut disputed = entry("d");
    disputed.reviews = vec![mark(Verdict::Good), mark(Verdict::Broken)];
    let keeps = |f: PoolFilter| {
        [&none, &good, &disputed]
            .into_iter()
            .filter(|e| f.matches(e))
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>()
    };
    let by = |v: &str| PoolFilter {
        verdict: VerdictFilter::parse(v),
        ..PoolFilter::default()
    };
    assert_eq!(keeps(by("good")), ["g", "d"], "some member marked it good");
    assert_eq!(keeps(by("broken")), ["d"]);
    assert_eq!(keeps(by("reward_hackable")), Vec::<&str>::new());
    assert_eq!(keeps(by("unreviewed")), ["n"]);
    assert_eq!(VerdictFilter::parse("meh"), None);
    for v in VerdictFilter::ALL {
        assert_eq!(VerdictFilter::parse(v.as_str()), Some(v));
    }
    let curated = PoolFilter {
        curated: true,
        ..PoolFilter::default()
    };
    assert_eq!(keeps(curated.clone()), ["g"]);
    assert!(
        curated.describe().starts_with("curated"),
        "{}",
        curated.describe()
    );
    assert_eq!(by("unreviewed").describe(), "no review mark");
    assert_eq!(by("good").describe(), "marked good");
}

#[test]
fn the_builder_names_files_once_gives_lines_that_name_them_and_counts_the_card() {
    let inline = |id: &str| PoolEntry {
        code_file: None,
        code: Some(format!("class {id}: pass\n")),
        ..entry(id)
    };
    let mut b = PoolBuilder::new(Card::default());
    let f = b.add(inline("s/1")).unwrap();
    assert_eq!(f.name, "s_1.py");
    assert_eq!(f.code, "class s/1: pass\n");
    let line: PoolEntry = serde_json::from_str(&f.line).unwrap();
    assert_eq!(
        (line.code_file.as_deref(), line.code),
        (Some("s_1.py"), None)
    );
    assert_eq!(b.add(inline("s/1")), Err(Refused::DuplicateId));
    assert_eq!(b.add(entry("no-code")), Err(Refused::NoCode));
    let mut bad = inline("s:1");
    bad.skill = "Juggling".into();
    assert!(matches!(b.add(bad), Err(Refused::Invalid(m)) if m.contains("Juggling")));
    // The refused entry kept no name: the next one of the same stem gets `-2`, not `-3`.
    assert_eq!(b.add(inline("s?1")).map(|f| f.name), Ok("s_1-2.py".into()));
    let card = b.finish();
    assert_eq!(card.counts.values().sum::<usize>(), 2);
}
