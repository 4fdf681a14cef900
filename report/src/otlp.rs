//! OTLP profiles: processes' profiles as one `ExportProfilesServiceRequest`
//! (`opentelemetry.proto.collector.profiles.v1development`, the wire format of OTLP 1.10), as
//! the OpenTelemetry eBPF profiler sends them, so that a collector or backend that reads its
//! profiles reads ours.
//!
//! - One `ResourceProfiles` per process, with the semantic-convention attributes the OTel
//!   profiler sets: `process.pid`, `process.executable.name`, `process.executable.path`,
//!   `container.id` (when the process runs in a container), `host.name`; and, where known,
//!   `service.name` and `process.vpid` (its pid in its own pid namespace).
//! - One profile each, of sample type `samples/count` and period type `cpu/nanoseconds` (the
//!   sampling interval), with the sample attributes `thread.id`, `thread.name`, and
//!   `process.context.label.KEY` for each label the sample's thread had set (as the OTel
//!   profiler names custom labels).
//! - One shared dictionary: every table's entry 0 is the zero value (`string_table[0]` is "").
//! - Locations carry `profile.frame.type`: `kernel`, `native`, the runtime of a process's JIT
//!   code named from its perf map or jitdump (`v8js` for node, `jvm` for java, `cpython` for
//!   python), and `vmscope` for code a VM published through vmscope's own code map protocol.
//!   Our names stay whole: a JIT frame's bytecode range is its line (and the location's
//!   `vmscope.code.range`), and a method inlined into compiled code is a line of the compiled
//!   method's location, innermost first, as OTLP (and pprof) say inlining.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime},
};

use indexmap::IndexSet;
use opentelemetry_proto::tonic::{
    collector::profiles::v1development::ExportProfilesServiceRequest,
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value},
    profiles::v1development as otlp,
    resource::v1::Resource,
};
use vmscope_model::{self as model, Section};

use crate::pprof::range_position;

/// The prefix of a program's label's key as a sample attribute.
pub const LABEL_ATTRIBUTE_PREFIX: &str = "process.context.label.";

/// One process's profile over one window, and what its resource says of it.
#[derive(Debug, Clone, Copy)]
pub struct ProcessProfile<'a> {
    /// The profile (its stacks are what is sent).
    pub profile: &'a model::Profile,
    /// The process.
    pub pid: u32,
    /// Its executable's path; empty when unknown.
    pub executable: &'a str,
    /// Its command (`comm`), the executable's name when the path is unknown.
    pub command: &'a str,
    /// The id of the container it runs in, when it runs in one.
    pub container_id: Option<&'a str>,
    /// The service it is, when known (as it declares itself to OpenTelemetry, or its systemd
    /// unit).
    pub service_name: Option<&'a str>,
    /// Its pid in its own pid namespace, when that is not the host's.
    pub namespace_pid: Option<u32>,
    /// When the window began.
    pub start: SystemTime,
    /// How long it lasted.
    pub duration: Duration,
    /// CPU time one sample stands for, in nanoseconds.
    pub period_ns: u64,
}

/// The attribute that says what kind of code a location is.
pub const FRAME_TYPE: &str = "profile.frame.type";

/// The location attribute that keeps a JIT frame's range (`74->78`, `app.js:12:5`).
pub const CODE_RANGE: &str = "vmscope.code.range";

/// `processes` as one export request, from host `host_name`.
pub fn export_request(
    processes: &[ProcessProfile<'_>],
    host_name: &str,
) -> ExportProfilesServiceRequest {
    let mut dictionary = Dictionary::new();
    let resource_profiles = processes
        .iter()
        .map(|process| dictionary.resource_profiles(process, host_name))
        .collect();
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(dictionary.finish()),
    }
}

/// An integer attribute value.
fn int(n: i64) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::IntValue(n)),
    }
}

/// What kind of code a frame is, as `profile.frame.type` says it.
pub fn frame_type(frame: &model::Frame, executable: &str) -> &'static str {
    if frame.kernel {
        return "kernel";
    }
    if frame.section != Section::Generated {
        return "native";
    }
    if frame.code_map == "vm" {
        return "vmscope";
    }
    let name = executable.rsplit('/').next().unwrap_or(executable);
    if name.starts_with("node") {
        "v8js"
    } else if name.starts_with("java") {
        "jvm"
    } else if name.starts_with("python") {
        "cpython"
    } else {
        "native"
    }
}

/// An attribute's value, as the dictionary interns it: a string by its index in the string
/// table, so that looking one up allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Value {
    Str(i32),
    Int(i64),
}

/// What makes a location: its mapping, its lines (function, line, column; innermost first)
/// and its attributes.
type LocationKey = (i32, Vec<(i32, i64, i64)>, Vec<i32>);

/// The interning tables' hasher: foldhash (seeded at random per table, as std's), since
/// hashing the keys with std's SipHash was a third of an export's time.
type Hasher = foldhash::fast::RandomState;

/// The shared tables, each with its zero value at index 0, interned as they are filled. The
/// tables whose entries are their own keys (strings, locations, stacks) are kept as index sets
/// and made into the message's tables at the end, so that each entry is allocated once.
struct Dictionary {
    strings: IndexSet<String, Hasher>,
    attributes: HashMap<(i32, Value), i32, Hasher>,
    attribute_table: Vec<otlp::KeyValueAndUnit>,
    mappings: HashMap<i32, i32, Hasher>,
    mapping_table: Vec<otlp::Mapping>,
    functions: HashMap<(i32, i32), i32, Hasher>,
    function_table: Vec<otlp::Function>,
    /// Every location but the zero one: location `i` is entry `i + 1`.
    locations: IndexSet<LocationKey, Hasher>,
    /// Every stack but the zero one: stack `i` is entry `i + 1`.
    stacks: IndexSet<Vec<i32>, Hasher>,
}

impl Dictionary {
    fn new() -> Dictionary {
        let mut dictionary = Dictionary {
            strings: IndexSet::default(),
            attributes: HashMap::default(),
            attribute_table: vec![otlp::KeyValueAndUnit::default()],
            mappings: HashMap::default(),
            mapping_table: vec![otlp::Mapping::default()],
            functions: HashMap::default(),
            function_table: vec![otlp::Function::default()],
            locations: IndexSet::default(),
            stacks: IndexSet::default(),
        };
        dictionary.string("");
        dictionary
    }

    fn finish(self) -> otlp::ProfilesDictionary {
        let location_table = std::iter::once(otlp::Location::default())
            .chain(
                self.locations
                    .into_iter()
                    .map(|(mapping_index, lines, attribute_indices)| otlp::Location {
                        mapping_index,
                        address: 0,
                        lines: lines
                            .into_iter()
                            .map(|(function_index, line, column)| otlp::Line {
                                function_index,
                                line,
                                column,
                            })
                            .collect(),
                        attribute_indices,
                    }),
            )
            .collect();
        let stack_table = std::iter::once(otlp::Stack::default())
            .chain(
                self.stacks
                    .into_iter()
                    .map(|location_indices| otlp::Stack { location_indices }),
            )
            .collect();
        otlp::ProfilesDictionary {
            mapping_table: self.mapping_table,
            location_table,
            function_table: self.function_table,
            link_table: vec![otlp::Link::default()],
            string_table: self.strings.into_iter().collect(),
            attribute_table: self.attribute_table,
            stack_table,
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        let i = match self.strings.get_index_of(s) {
            Some(i) => i,
            None => self.strings.insert_full(s.to_owned()).0,
        };
        i as i32
    }

    fn attribute(&mut self, key: &str, value: Value) -> i32 {
        let key = self.string(key);
        let table = &mut self.attribute_table;
        let strings = &self.strings;
        *self.attributes.entry((key, value)).or_insert_with(|| {
            let value = match value {
                Value::Str(s) => any_value::Value::StringValue(strings[s as usize].clone()),
                Value::Int(n) => any_value::Value::IntValue(n),
            };
            table.push(otlp::KeyValueAndUnit {
                key_strindex: key,
                value: Some(AnyValue { value: Some(value) }),
                unit_strindex: 0,
            });
            (table.len() - 1) as i32
        })
    }

    fn text_attribute(&mut self, key: &str, value: &str) -> i32 {
        let value = Value::Str(self.string(value));
        self.attribute(key, value)
    }

    fn mapping(&mut self, module: &str) -> i32 {
        let name = self.string(module);
        let table = &mut self.mapping_table;
        *self.mappings.entry(name).or_insert_with(|| {
            table.push(otlp::Mapping {
                filename_strindex: name,
                ..otlp::Mapping::default()
            });
            (table.len() - 1) as i32
        })
    }

    fn function(&mut self, frame: &model::Frame) -> i32 {
        let name = self.string(if frame.name.is_empty() {
            "[unknown]"
        } else {
            &frame.name
        });
        let file = self.string(if frame.file.is_empty() {
            &frame.module
        } else {
            &frame.file
        });
        let table = &mut self.function_table;
        *self.functions.entry((name, file)).or_insert_with(|| {
            table.push(otlp::Function {
                name_strindex: name,
                system_name_strindex: name,
                filename_strindex: file,
                start_line: 0,
            });
            (table.len() - 1) as i32
        })
    }

    /// The location of a run of frames, innermost first: methods inlined into the last, the
    /// compiled method that holds the code.
    fn location(&mut self, run: &[&model::Frame], executable: &str) -> i32 {
        let outer = run[run.len() - 1];
        let mapping = self.mapping(&outer.module);
        let lines: Vec<(i32, i64, i64)> = run
            .iter()
            .map(|frame| {
                let (line, column) = if frame.line > 0 {
                    (i64::from(frame.line), 0)
                } else {
                    range_position(&frame.range)
                };
                (self.function(frame), line, column)
            })
            .collect();
        let mut attributes = vec![self.text_attribute(FRAME_TYPE, frame_type(outer, executable))];
        if !outer.range.is_empty() {
            attributes.push(self.text_attribute(CODE_RANGE, &outer.range));
        }
        let key = (mapping, lines, attributes);
        let i = match self.locations.get_index_of(&key) {
            Some(i) => i,
            None => self.locations.insert_full(key).0,
        };
        (i + 1) as i32
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        let i = match self.stacks.get_index_of(&locations) {
            Some(i) => i,
            None => self.stacks.insert_full(locations).0,
        };
        (i + 1) as i32
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> otlp::ValueType {
        otlp::ValueType {
            type_strindex: self.string(kind),
            unit_strindex: self.string(unit),
        }
    }

    fn resource_profiles(
        &mut self,
        process: &ProcessProfile<'_>,
        host_name: &str,
    ) -> otlp::ResourceProfiles {
        let profile = process.profile;
        let thread_names: HashMap<(u32, u32), &str, Hasher> = profile
            .threads
            .iter()
            .map(|t| ((t.pid, t.tid), t.name.as_str()))
            .collect();
        let mut samples = Vec::with_capacity(profile.stacks.len());
        let mut frames: Vec<&model::Frame> = Vec::new();
        for stack in profile.stacks.iter().filter(|s| s.samples() > 0) {
            frames.clear();
            frames.extend(
                profile
                    .stack_frames(stack)
                    .filter_map(|f| profile.frames.get(f as usize)),
            );
            let mut locations = Vec::with_capacity(frames.len());
            let mut start = 0;
            for i in 0..frames.len() {
                // A run of inlined frames ends at the compiled method's, or where a stack cut
                // inside the run ends.
                if !frames[i].inlined || i + 1 == frames.len() {
                    locations.push(self.location(&frames[start..=i], process.executable));
                    start = i + 1;
                }
            }
            let mut attribute_indices =
                vec![self.attribute("thread.id", Value::Int(i64::from(stack.tid)))];
            if let Some(name) = thread_names
                .get(&(stack.pid, stack.tid))
                .filter(|n| !n.is_empty())
            {
                attribute_indices.push(self.text_attribute("thread.name", name));
            }
            for label in profile.labels_of(stack) {
                let key = format!("{LABEL_ATTRIBUTE_PREFIX}{}", label.key);
                attribute_indices.push(self.text_attribute(&key, &label.value));
            }
            samples.push(otlp::Sample {
                stack_index: self.stack(locations),
                attribute_indices,
                link_index: 0,
                values: vec![i64::try_from(stack.samples()).unwrap_or(i64::MAX)],
                timestamps_unix_nano: Vec::new(),
            });
        }
        let time_unix_nano = process
            .start
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let otlp_profile = otlp::Profile {
            sample_type: Some(self.value_type("samples", "count")),
            samples,
            time_unix_nano,
            duration_nano: u64::try_from(process.duration.as_nanos()).unwrap_or(u64::MAX),
            period_type: Some(self.value_type("cpu", "nanoseconds")),
            period: i64::try_from(process.period_ns).unwrap_or(i64::MAX),
            ..otlp::Profile::default()
        };
        let name = match process.executable.rsplit('/').next() {
            Some(name) if !name.is_empty() => name,
            _ => process.command,
        };
        let text = |key: &str, value: &str| KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_owned())),
            }),
            ..KeyValue::default()
        };
        let mut attributes = vec![
            KeyValue {
                key: "process.pid".to_owned(),
                value: Some(int(i64::from(process.pid))),
                ..KeyValue::default()
            },
            text("process.executable.name", name),
        ];
        if !process.executable.is_empty() {
            attributes.push(text("process.executable.path", process.executable));
        }
        if let Some(vpid) = process.namespace_pid {
            attributes.push(KeyValue {
                key: "process.vpid".to_owned(),
                value: Some(int(i64::from(vpid))),
                ..KeyValue::default()
            });
        }
        if let Some(id) = process.container_id {
            attributes.push(text("container.id", id));
        }
        if let Some(service) = process.service_name {
            attributes.push(text("service.name", service));
        }
        attributes.push(text("host.name", host_name));
        otlp::ResourceProfiles {
            resource: Some(Resource {
                attributes,
                ..Resource::default()
            }),
            scope_profiles: vec![otlp::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "vmscope".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                profiles: vec![otlp_profile],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack_fixture::{self as fixture};

    fn process(profile: &model::Profile, pid: u32) -> ProcessProfile<'_> {
        ProcessProfile {
            profile,
            pid,
            executable: "/opt/jitvm/bin/jitvm",
            command: "jitvm",
            container_id: Some("abc123"),
            service_name: Some("checkout"),
            namespace_pid: Some(7),
            start: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
            duration: Duration::from_secs(10),
            period_ns: 1_000_000,
        }
    }

    fn string(request: &ExportProfilesServiceRequest, i: i32) -> &str {
        &request.dictionary.as_ref().unwrap().string_table[i as usize]
    }

    /// The frames of a sample, leaf first, as names (each location's lines innermost first).
    fn names(request: &ExportProfilesServiceRequest, sample: &otlp::Sample) -> Vec<String> {
        let dictionary = request.dictionary.as_ref().unwrap();
        let stack = &dictionary.stack_table[sample.stack_index as usize];
        stack
            .location_indices
            .iter()
            .flat_map(|&l| &dictionary.location_table[l as usize].lines)
            .map(|line| {
                let function = &dictionary.function_table[line.function_index as usize];
                string(request, function.name_strindex).to_owned()
            })
            .collect()
    }

    #[test]
    fn every_table_starts_with_its_zero_value() {
        let profile = fixture::profile();
        let request = export_request(&[process(&profile, 100)], "host");
        let d = request.dictionary.as_ref().unwrap();
        assert_eq!(d.string_table[0], "");
        assert_eq!(d.mapping_table[0], otlp::Mapping::default());
        assert_eq!(d.location_table[0], otlp::Location::default());
        assert_eq!(d.function_table[0], otlp::Function::default());
        assert_eq!(d.link_table[0], otlp::Link::default());
        assert_eq!(d.attribute_table[0], otlp::KeyValueAndUnit::default());
        assert_eq!(d.stack_table[0], otlp::Stack::default());
    }

    #[test]
    fn a_process_is_a_resource_with_its_samples_and_names() {
        let profile = fixture::profile();
        let request = export_request(&[process(&profile, 100)], "host-1");
        assert_eq!(request.resource_profiles.len(), 1);
        let resource = request.resource_profiles[0].resource.as_ref().unwrap();
        let attribute = |key: &str| {
            resource
                .attributes
                .iter()
                .find(|a| a.key == key)
                .and_then(|a| a.value.as_ref()?.value.clone())
        };
        assert_eq!(
            attribute("process.pid"),
            Some(any_value::Value::IntValue(100))
        );
        assert_eq!(
            attribute("process.vpid"),
            Some(any_value::Value::IntValue(7))
        );
        for (key, value) in [
            ("process.executable.name", "jitvm"),
            ("process.executable.path", "/opt/jitvm/bin/jitvm"),
            ("container.id", "abc123"),
            ("service.name", "checkout"),
            ("host.name", "host-1"),
        ] {
            assert_eq!(
                attribute(key),
                Some(any_value::Value::StringValue(value.into())),
                "{key}"
            );
        }
        let otlp_profile = &request.resource_profiles[0].scope_profiles[0].profiles[0];
        let kind = otlp_profile.sample_type.unwrap();
        assert_eq!(
            (
                string(&request, kind.type_strindex),
                string(&request, kind.unit_strindex)
            ),
            ("samples", "count")
        );
        let period = otlp_profile.period_type.unwrap();
        assert_eq!(string(&request, period.type_strindex), "cpu");
        assert_eq!(otlp_profile.period, 1_000_000);
        assert_eq!(otlp_profile.time_unix_nano, 1_000_000_000_000);
        let total: i64 = otlp_profile.samples.iter().map(|s| s.values[0]).sum();
        assert_eq!(total as u64, profile.total_samples);
        // The inlined method is a line of its compiled method's location, innermost first.
        let inlined = otlp_profile
            .samples
            .iter()
            .map(|s| names(&request, s))
            .find(|n| n[0] == "Inline>>heavy")
            .expect("the inlined stack");
        assert_eq!(inlined[..2], ["Inline>>heavy", "Inline>>bench"]);
        let d = request.dictionary.as_ref().unwrap();
        let heavy = d
            .location_table
            .iter()
            .find(|l| l.lines.len() == 2)
            .expect("one location of two lines");
        let kinds: Vec<String> = heavy
            .attribute_indices
            .iter()
            .map(|&a| {
                let kv = &d.attribute_table[a as usize];
                format!(
                    "{}={:?}",
                    string(&request, kv.key_strindex),
                    kv.value.as_ref().unwrap().value
                )
            })
            .collect();
        assert!(
            kinds.contains(&r#"profile.frame.type=Some(StringValue("vmscope"))"#.to_owned()),
            "{kinds:?}"
        );
        assert!(
            kinds.iter().any(|k| k.starts_with("vmscope.code.range=")),
            "{kinds:?}"
        );
    }

    /// A sample's thread's labels are its attributes `process.context.label.KEY`.
    #[test]
    fn labels_are_sample_attributes() {
        let mut profile = fixture::profile();
        profile.labels = vec![model::Label::new("phase", "parse")];
        for stack in &mut profile.stacks {
            stack.labels = vec![0];
        }
        let request = export_request(&[process(&profile, 100)], "host");
        let d = request.dictionary.as_ref().unwrap();
        let samples = &request.resource_profiles[0].scope_profiles[0].profiles[0].samples;
        assert!(!samples.is_empty());
        for sample in samples {
            let found = sample.attribute_indices.iter().any(|&a| {
                let kv = &d.attribute_table[a as usize];
                string(&request, kv.key_strindex) == "process.context.label.phase"
                    && kv.value.as_ref().unwrap().value
                        == Some(any_value::Value::StringValue("parse".into()))
            });
            assert!(found, "{sample:?}");
        }
    }

    #[test]
    fn frame_types_follow_the_code_and_its_runtime() {
        let jit = |code_map: &str| model::Frame {
            section: Section::Generated,
            code_map: code_map.into(),
            ..model::Frame::default()
        };
        let kernel = model::Frame {
            kernel: true,
            ..model::Frame::default()
        };
        assert_eq!(frame_type(&kernel, "/usr/bin/node"), "kernel");
        assert_eq!(
            frame_type(&model::Frame::default(), "/usr/bin/node"),
            "native"
        );
        assert_eq!(frame_type(&jit("vm"), "/usr/bin/node"), "vmscope");
        assert_eq!(frame_type(&jit("perf map"), "/usr/bin/node"), "v8js");
        assert_eq!(frame_type(&jit("perf map"), "/usr/lib/jvm/bin/java"), "jvm");
        assert_eq!(
            frame_type(&jit("perf map"), "/usr/bin/python3.12"),
            "cpython"
        );
        assert_eq!(frame_type(&jit("jitdump"), "/opt/vm"), "native");
    }
}
