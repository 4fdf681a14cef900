//! The JSON report (`--format json`): the report model serialised as it is, for scripts and
//! CI. The model's types derive `Serialize`: the document's fields, their order, rounding and
//! nulls are declared on them, and documented there ([`vmscope_report::json`] says how it
//! reads as a whole). Here are only the entry points.

use vmscope_report::Report;
use vmscope_report::stack_view::ShownStacks;

pub use vmscope_report::json::JsonReport;

/// The JSON view of `report`, ready for `serde_json::to_writer_pretty` or `to_value`.
pub fn render_json(report: &Report) -> JsonReport<'_> {
    JsonReport::new(report)
}

/// [`render_json`] followed by the stack table of the profile `report` was made from, its
/// stacks as `shown`.
pub fn render_json_with_stacks<'a>(
    report: &'a Report,
    shown: &'a ShownStacks<'a>,
) -> JsonReport<'a> {
    JsonReport::with_stacks(report, shown)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use vmscope_model::{self as model, Profile};

    use super::super::{Format, render};
    use super::*;
    use vmscope_report::fixtures::{jit_profile, node_profile};
    use vmscope_report::stack_view::{FrameView, StackOptions};
    use vmscope_report::{OTHERS_NAME, ReportOptions, round2};

    const OPTIONS: ReportOptions = ReportOptions::DEFAULT;

    fn parsed(report: &Report) -> Value {
        let text = serde_json::to_string(&render_json(report)).expect("serialise");
        serde_json::from_str(&text).expect("parse back")
    }

    fn f64_at(value: &Value, key: &str) -> f64 {
        value[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} is not a number in {value}"))
    }

    #[test]
    fn header_fields_round_trip() {
        let report = Report::from_profile(&node_profile(), &OPTIONS);
        let json = parsed(&report);
        assert_eq!(json["session_id"], 7);
        assert_eq!(
            json["targets"],
            serde_json::json!([
                {"pid": 4242, "command": "node", "executable": "/usr/bin/node", "exited": false, "note": ""}
            ])
        );
        assert_eq!(json["system_wide"], false);
        assert_eq!(json["vm_executable"], "/usr/bin/node");
        assert_eq!(json["started_at"], "2026-11-22T10:00:00Z");
        assert_eq!(f64_at(&json, "duration_seconds"), 5.002);
        assert_eq!(json["requested_frequency_hz"], 1400);
        assert_eq!(
            Some(f64_at(&json, "measured_frequency_hz")),
            report.measured_frequency_hz
        );
        assert_eq!(f64_at(&json, "cpu_seconds"), 10.012);
        assert_eq!(Some(f64_at(&json, "busy_cpus")), report.busy_cpus);
        assert_eq!(json["total_samples"], 14_000);
        assert_eq!(json["vm_samples"], 13_000);
        assert_eq!(f64_at(&json, "vm_percent_of_total"), 92.86);
        assert_eq!(json["lost_samples"], 16);
        assert_eq!(
            json["lost_samples_per_cpu"],
            serde_json::json!([12, 0, 0, 4])
        );
        assert_eq!(json["call_graph"], report.call_graph_mode);
        assert_eq!(json["dwarf_stack_bytes"], serde_json::Value::Null);
        assert_eq!(json["complete"], true);
        assert_eq!(json["stop_reason"], "all targets exited");
        assert_eq!(
            json["symbolization_issues"][0],
            serde_json::json!({
                "module": "libstdc++.so.6",
                "kind": "no_symbol",
                "reason": "no symbol covers the address",
                "samples": 98
            })
        );
    }

    /// The daemon's throttling judgement reaches JSON, not only the text report's warning.
    #[test]
    fn throttling_reaches_json() {
        let json = parsed(&Report::from_profile(&node_profile(), &OPTIONS));
        assert_eq!(json["throttled"], false);
        let mut throttled = node_profile();
        throttled.taken_frequency_hz = 700.0;
        throttled.throttled = true;
        let json = parsed(&Report::from_profile(&throttled, &OPTIONS));
        assert_eq!(json["throttled"], true);
        assert_eq!(json["taken_frequency_hz"], 700.0);
    }

    #[test]
    fn dwarf_sessions_say_how_much_stack_they_copied() {
        let mut profile = node_profile();
        let session = profile.session.get_or_insert_with(Default::default);
        session.call_graph = Some(model::CallGraph::Dwarf);
        session.dwarf_stack_bytes = 65528;
        let json = parsed(&Report::from_profile(&profile, &OPTIONS));
        assert_eq!(json["call_graph"], "dwarf");
        assert_eq!(json["dwarf_stack_bytes"], 65528);
    }

    #[test]
    fn sections_and_rows_carry_the_models_rounded_numbers() {
        let report = Report::from_profile(&node_profile(), &OPTIONS);
        let json = parsed(&report);
        let sections = json["sections"].as_array().expect("sections is an array");
        assert_eq!(sections.len(), report.sections.len());
        for (js, section) in sections.iter().zip(&report.sections) {
            assert_eq!(js["section"], section.section.as_str());
            assert_eq!(js["title"], section.title.as_str());
            assert_eq!(js["samples"], section.samples);
            match section.percent_of_vm {
                Some(p) => assert_eq!(f64_at(js, "percent_of_vm"), round2(p)),
                None => assert!(js["percent_of_vm"].is_null()),
            }
            assert_eq!(
                f64_at(js, "percent_of_total"),
                round2(section.percent_of_total)
            );
            let rows = js["rows"].as_array().expect("rows is an array");
            assert_eq!(rows.len(), section.rows.len());
            for (jr, row) in rows.iter().zip(&section.rows) {
                assert_eq!(jr["name"], row.name.as_str());
                assert_eq!(jr["module"], row.module.as_str());
                assert_eq!(jr["section"], section.section.as_str());
                assert_eq!(jr["samples"], row.samples);
                assert_eq!(jr["symbolized"], row.symbolized);
                assert_eq!(jr["folded_rows"], row.folded_rows);
                for (key, value) in [
                    ("percent_of_section", row.percent_of_section),
                    ("percent_of_total", row.percent_of_total),
                    ("cumulative_percent", row.cumulative_percent),
                ] {
                    assert_eq!(f64_at(jr, key), round2(value), "{key} of {jr}");
                }
            }
        }
        // Spot checks against numbers worked out by hand.
        let generated = &sections[0]["rows"];
        assert_eq!(
            generated[0]["name"],
            "LazyCompile:*hotLoop /tmp/fixture/hot.js:12"
        );
        assert_eq!(f64_at(&generated[0], "percent_of_section"), 57.78);
        assert_eq!(f64_at(&generated[0], "percent_of_total"), 37.14);
        let others = &sections[2]["rows"][3];
        assert_eq!(others["name"], OTHERS_NAME);
        assert_eq!(others["folded_rows"], 2);
        assert_eq!(f64_at(others, "cumulative_percent"), 100.0);
    }

    #[test]
    fn ranges_inlined_and_kinds_equal_the_models_rounded() {
        let report = Report::from_profile(&jit_profile(), &OPTIONS);
        let json = parsed(&report);
        let mut rows_with_ranges = 0;
        for (js, section) in json["sections"]
            .as_array()
            .expect("sections is an array")
            .iter()
            .zip(&report.sections)
        {
            for (jr, row) in js["rows"]
                .as_array()
                .expect("rows is an array")
                .iter()
                .zip(&section.rows)
            {
                match row.kind {
                    Some(kind) => assert_eq!(jr["kind"], kind.as_str()),
                    None => assert!(jr["kind"].is_null(), "{jr}"),
                }
                if row.code_map.is_empty() {
                    assert!(jr["code_map"].is_null(), "{jr}");
                } else {
                    assert_eq!(jr["code_map"], row.code_map.as_str());
                }
                let ranges = jr["ranges"].as_array().expect("ranges on every row");
                assert_eq!(ranges.len(), row.ranges.len(), "{jr}");
                for (jg, range) in ranges.iter().zip(&row.ranges) {
                    assert_eq!(jg["label"], range.label.as_str());
                    assert_eq!(jg["samples"], range.samples);
                    assert_eq!(
                        f64_at(jg, "percent_of_method"),
                        round2(range.percent_of_method)
                    );
                    assert_eq!(
                        f64_at(jg, "cumulative_percent"),
                        round2(range.cumulative_percent)
                    );
                }
                rows_with_ranges += usize::from(!ranges.is_empty());
                let inlined = jr["inlined"].as_array().expect("inlined on every row");
                assert_eq!(inlined.len(), row.inlined.len(), "{jr}");
                for (ji, method) in inlined.iter().zip(&row.inlined) {
                    assert_eq!(ji["name"], method.name.as_str());
                    assert_eq!(ji["samples"], method.samples);
                    assert_eq!(
                        f64_at(ji, "percent_of_method"),
                        round2(method.percent_of_method)
                    );
                }
            }
        }
        // benchFib, benchmark, Inline>>bench, the block, and SmallInteger>>- (0.5% of the
        // total, under min_range_percent: not in the text, but in the JSON).
        assert_eq!(rows_with_ranges, 5);

        // Spot checks against numbers worked out by hand.
        let generated = &json["sections"][0]["rows"];
        assert_eq!(generated[0]["name"], "Integer>>benchFib");
        assert_eq!(generated[0]["kind"], "method");
        assert_eq!(generated[0]["code_map"], "vm");
        assert_eq!(
            generated[0]["ranges"][2],
            serde_json::json!({
                "label": "30->31", "samples": 137, "percent_of_method": 2.89,
                "cumulative_percent": 66.74
            })
        );
        assert_eq!(
            f64_at(&generated[0]["ranges"][7], "cumulative_percent"),
            100.0
        );
        assert_eq!(
            generated[2]["inlined"][0],
            serde_json::json!({"name": "Inline>>heavy", "samples": 1234, "percent_of_method": 68.21})
        );
        assert_eq!(generated[3]["kind"], "closed_pic");
        assert_eq!(generated[3]["ranges"], serde_json::json!([]));
        assert_eq!(generated[4]["kind"], "open_pic");
        assert_eq!(generated[6]["kind"], "trampoline");
        let small = &generated[7];
        assert_eq!(small["name"], "SmallInteger>>-");
        assert_eq!(small["ranges"][1]["label"], "3->end");
        assert_eq!(f64_at(&small["ranges"][0], "percent_of_method"), 60.0);
        let vanilla = &json["sections"][1]["rows"][0];
        assert!(vanilla["kind"].is_null() && vanilla["code_map"].is_null());
        assert_eq!(vanilla["ranges"], serde_json::json!([]));
        assert_eq!(vanilla["inlined"], serde_json::json!([]));
    }

    #[test]
    fn vm_modules_agree_in_json() {
        let options = ReportOptions {
            vm_modules: vec!["lib*Plugin.so".into()],
            ..OPTIONS
        };
        let json = parsed(&Report::from_profile(&jit_profile(), &options));
        assert_eq!(json["vm_samples"], 9858);
        assert_eq!(f64_at(&json, "vm_percent_of_total"), 98.58);
        let vanilla = &json["sections"][1];
        assert_eq!(vanilla["samples"], 326);
        assert_eq!(f64_at(vanilla, "percent_of_vm"), 3.31);
        assert_eq!(vanilla["rows"][2]["module"], "libSocketPlugin.so");
        assert_eq!(vanilla["rows"][2]["section"], "vanilla");
        assert_eq!(json["sections"][2]["samples"], 142);
    }

    #[test]
    fn empty_profile_has_nulls_not_nan() {
        let report = Report::from_profile(&Profile::default(), &OPTIONS);
        let json = parsed(&report);
        assert!(json["started_at"].is_null());
        assert!(json["stop_reason"].is_null());
        assert!(json["busy_cpus"].is_null(), "nothing measured");
        assert!(json["measured_frequency_hz"].is_null());
        assert_eq!(json["sections"][0]["rows"], serde_json::json!([]));
        assert_eq!(f64_at(&json["sections"][1], "percent_of_total"), 0.0);
    }

    #[test]
    fn the_stack_table_follows_the_flat_report() {
        let mut profile = jit_profile();
        profile.frames = vec![
            model::Frame {
                section: model::Section::Vanilla,
                name: "interpret".into(),
                module: "squeak".into(),
                symbolized: true,
                build_id: "0badc0de".into(),
                file: "/src/vm/interp.c".into(),
                line: 812,
                ..Default::default()
            },
            model::Frame {
                section: model::Section::Generated,
                name: "Inline>>heavy".into(),
                module: "[anon]".into(),
                symbolized: true,
                kind: Some(model::CodeKind::Method),
                range: "33->70".into(),
                inlined: true,
                code_map: "vm".into(),
                optimised: true,
                ..Default::default()
            },
            model::Frame {
                section: model::Section::Other,
                name: "ksys_write".into(),
                module: "[kernel.kallsyms]".into(),
                kernel: true,
                ..Default::default()
            },
        ];
        let mut tree = model::StackTreeBuilder::new();
        profile.stacks = vec![
            model::Stack {
                node: tree.intern(&[1, 0]),
                pid: 42,
                tid: 43,
                values: vec![9000, 9000 * 714_286],
                truncated: false,
                end: Some(model::StackEnd::Complete),
                during: Vec::new(),
                state: None,
                labels: Vec::new(),
            },
            model::Stack {
                node: tree.intern(&[2, 0]),
                pid: 42,
                tid: 42,
                values: vec![1000, 1000 * 714_286],
                truncated: true,
                end: Some(model::StackEnd::DepthLimit),
                during: vec![0],
                state: None,
                labels: Vec::new(),
            },
        ];
        profile.stack_nodes = tree.finish();
        profile.vm_interval_kinds = vec![model::IntervalKind::Scavenge];
        profile.sample_types = vec![model::SampleType::Samples, model::SampleType::CpuTime];
        profile.threads = vec![
            model::Thread {
                pid: 42,
                tid: 43,
                name: "GC Thread#0".into(),
                samples: 9000,
                cpu_ns: 9000 * 714_286,
                ..Default::default()
            },
            model::Thread {
                pid: 42,
                tid: 42,
                name: String::new(),
                samples: 1000,
                cpu_ns: 1000 * 714_286,
                ..Default::default()
            },
        ];
        profile.truncated_stacks = 1000;
        let report = Report::from_profile(&profile, &OPTIONS);
        let native = ReportOptions {
            stacks: StackOptions {
                frames: FrameView::Native,
                collapse_recursion: false,
            },
            ..OPTIONS
        };
        let shown = ShownStacks::new(&profile, &native);
        let json =
            serde_json::to_value(render_json_with_stacks(&report, &shown)).expect("serialise");
        assert_eq!(
            json["stack_view"],
            serde_json::json!({"frames": "native", "collapse_recursion": false,
                               "samples_with_hidden_frames": 0,
                               "samples_with_collapsed_recursion": 0})
        );
        assert_eq!(
            json["frames"],
            serde_json::json!([
                {"name": "interpret", "module": "squeak", "section": "vanilla",
                 "symbolized": true, "kind": null, "range": null, "inlined": false,
                 "code_map": null, "optimised": false, "build_id": "0badc0de", "kernel": false,
                 "file": "/src/vm/interp.c", "line": 812, "later_snapshot": false},
                {"name": "Inline>>heavy", "module": "[anon]", "section": "generated",
                 "symbolized": true, "kind": "method", "range": "33->70", "inlined": true,
                 "code_map": "vm", "optimised": true, "build_id": null, "kernel": false,
                 "file": null, "line": null, "later_snapshot": false},
                {"name": "ksys_write", "module": "[kernel.kallsyms]", "section": "other",
                 "symbolized": false, "kind": null, "range": null, "inlined": false,
                 "code_map": null, "optimised": false, "build_id": null, "kernel": true,
                 "file": null, "line": null, "later_snapshot": false},
            ])
        );
        assert_eq!(
            json["stacks"],
            serde_json::json!([
                {"frames": [1, 0], "pid": 42, "tid": 43, "samples": 9000,
                 "values": [9000, 6_428_574_000u64], "truncated": false,
                 "end": "complete", "during": []},
                {"frames": [2, 0], "pid": 42, "tid": 42, "samples": 1000,
                 "values": [1000, 714_286_000], "truncated": true,
                 "end": "depth_limit", "during": ["scavenge"]},
            ])
        );
        assert_eq!(
            json["sample_types"],
            serde_json::json!(["samples", "cpu_time"])
        );
        assert_eq!(
            json["threads"],
            serde_json::json!([
                {"pid": 42, "tid": 43, "name": "GC Thread#0", "samples": 9000},
                {"pid": 42, "tid": 42, "name": null, "samples": 1000},
            ])
        );
        assert_eq!(json["truncated_stacks"], 1000);
        // The flat report's fields come first (a Value sorts keys: look at the text).
        let text =
            serde_json::to_string(&render_json_with_stacks(&report, &shown)).expect("serialise");
        let at = |key: &str| {
            text.find(&format!("\"{key}\":"))
                .unwrap_or_else(|| panic!("{key} in {text}"))
        };
        assert!(at("session_id") < at("symbolization_issues"));
        assert!(at("symbolization_issues") < at("stack_view"));
        assert!(at("stack_view") < at("frames"));
        assert!(at("frames") < at("stacks") && at("stacks") < at("truncated_stacks"));
        // And they are untouched.
        let mut flat = json.clone();
        for key in [
            "stack_view",
            "frames",
            "sample_types",
            "stacks",
            "threads",
            "truncated_stacks",
            "stack_ends",
        ] {
            flat.as_object_mut().expect("object").remove(key);
        }
        assert_eq!(flat, parsed(&report));

        // By default, the language view: the interpreter above the JIT method is hidden, the
        // kernel's stack (no language frame) whole; the frame table stays.
        let shown = ShownStacks::new(&profile, &OPTIONS);
        let json =
            serde_json::to_value(render_json_with_stacks(&report, &shown)).expect("serialise");
        assert_eq!(json["stack_view"]["frames"], "language");
        assert_eq!(json["stack_view"]["samples_with_hidden_frames"], 9000);
        assert_eq!(json["stacks"][0]["frames"], serde_json::json!([1]));
        assert_eq!(json["stacks"][1]["frames"], serde_json::json!([2, 0]));
        assert_eq!(json["frames"].as_array().map(Vec::len), Some(3));
    }

    #[test]
    fn render_json_format_is_pretty_json_and_a_newline() {
        let profile = node_profile();
        let report = Report::from_profile(&profile, &OPTIONS);
        let mut out = Vec::new();
        render(&profile, &OPTIONS, Format::Json, &mut out).expect("render");
        let text = String::from_utf8(out).expect("UTF-8");
        assert!(text.ends_with("}\n"), "{text}");
        assert!(text.starts_with("{\n  \"session_id\": 7,\n"), "{text}");
        let mut value: Value = serde_json::from_str(&text).expect("valid JSON");
        // The flat report's fields, then the stack table (empty in this fixture).
        let object = value.as_object_mut().expect("an object");
        assert_eq!(
            object.remove("stack_view"),
            Some(
                serde_json::json!({"frames": "language", "collapse_recursion": false,
                                    "samples_with_hidden_frames": 0,
                                    "samples_with_collapsed_recursion": 0})
            )
        );
        assert_eq!(object.remove("frames"), Some(serde_json::json!([])));
        assert_eq!(object.remove("sample_types"), Some(serde_json::json!([])));
        assert_eq!(object.remove("stacks"), Some(serde_json::json!([])));
        assert_eq!(object.remove("threads"), Some(serde_json::json!([])));
        assert_eq!(
            object.remove("truncated_stacks"),
            Some(serde_json::json!(0))
        );
        assert_eq!(object.remove("stack_ends"), Some(serde_json::json!([])));
        assert_eq!(value, parsed(&report));
        // Long names are never elided in JSON, whatever name_width says.
        assert!(
            text.contains("υπολογισμός_του_πολύ_μακρύ_ονόματος_μεθόδου /tmp/fixture/ελληνικά.js:3")
        );
    }
}
