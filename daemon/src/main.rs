use aya::{maps::{HashMap, RingBuf}, programs::{PerfEvent, perf_event::*}, util::online_cpus};
use vmscope_common::*;
fn main() -> anyhow::Result<()> {
    let mut ebpf = aya::Ebpf::load(vmscoped::EBPF)?;
    let prog: &mut PerfEvent = ebpf.program_mut("vmscope_sample").unwrap().try_into()?;
    prog.load()?;
    for cpu in online_cpus().unwrap() {
        prog.attach(PerfEventConfig::Software(SoftwareEvent::CpuClock), PerfEventScope::AllProcessesOneCpu { cpu }, SamplePolicy::Frequency(1400), false)?;
    }
    let mut sw: HashMap<_, u64, u8> = HashMap::try_from(ebpf.map_mut("SYSTEM_WIDE").unwrap())?;
    sw.insert(1_000_000_000u64 / 1400, 1, 0)?;
    let mut rb = RingBuf::try_from(ebpf.take_map("EVENTS").unwrap())?;
    let t = std::time::Instant::now();
    let mut n = 0; let mut periods = std::collections::BTreeMap::new();
    while t.elapsed().as_secs() < 2 {
        while let Some(item) = rb.next() { let e = Event::from_bytes(&item).unwrap(); n += 1; *periods.entry((e.period_ns, e.is_kernel())).or_insert(0) += 1; }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    println!("{n} samples {periods:?}");
    Ok(())
}
