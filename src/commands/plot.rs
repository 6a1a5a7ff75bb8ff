//! `tally bench --plot FILE.svg`: transfers per second of each block, and the process's
//! memory, over the run's time, as in the IAVL benchmark notebook (shared/seeds). Plain SVG,
//! no plotting dependency.

use std::fmt::Write;

use tally_bench::report::BlockPoint;

const WIDTH: f64 = 800.0;
const PANEL: f64 = 220.0;
const MARGIN: f64 = 60.0;

/// One panel: a polyline of `(x, y)` with axes labelled by their extremes, over time.
fn panel(svg: &mut String, top: f64, title: &str, unit: &str, points: &[(f64, f64)]) {
    series_panel(
        svg,
        top,
        title,
        unit,
        &[("", "#1f77b4", points.to_vec())],
        XAxis::Seconds,
    );
}

/// The SVG for blocks of `block_size` transfers, each with its transfers/s, and the process's
/// resident memory and the store's disk after it: a slow drift or a stall shows.
pub fn svg(title: &str, block_size: u64, total: u64, per_block: &[BlockPoint]) -> String {
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let mut t = 0.0;
    let mut left = total;
    let (mut tps, mut rss, mut disk) = (Vec::new(), Vec::new(), Vec::new());
    for p in per_block {
        let n = left.min(block_size);
        left -= n;
        t += n as f64 / p.tps.max(1e-9);
        tps.push((t, p.tps));
        rss.push((t, mib(p.rss_bytes)));
        disk.push((t, mib(p.disk_bytes)));
    }
    let height = 3.0 * PANEL + 4.0 * MARGIN;
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="{MARGIN}" y="20" font-size="13">{title}</text>
"##
    );
    panel(
        &mut svg,
        MARGIN,
        "transfers per second, per block",
        "/s",
        &tps,
    );
    panel(
        &mut svg,
        2.0 * MARGIN + PANEL,
        "resident memory after each block",
        "MiB",
        &rss,
    );
    panel(
        &mut svg,
        3.0 * MARGIN + 2.0 * PANEL,
        "the store on disk after each block",
        "MiB",
        &disk,
    );
    svg.push_str("</svg>\n");
    svg
}

/// What a panel's x axis counts.
#[derive(Clone, Copy)]
enum XAxis {
    /// Seconds since the run began.
    Seconds,
    /// Blocks.
    Blocks,
}

/// A named series of `(x, y)` points and its colour.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One panel of several named series over blocks, each a polyline in its own colour, with a
/// legend; y from 0 to the largest value.
fn series_panel(
    svg: &mut String,
    top: f64,
    title: &str,
    unit: &str,
    series: &[Series<'_>],
    x_axis: XAxis,
) {
    let all = || series.iter().flat_map(|s| s.2.iter());
    let x_max = all().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let y_max = all().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let (left, bottom) = (MARGIN, top + PANEL);
    let plot_w = WIDTH - 2.0 * MARGIN;
    let _ = writeln!(
        svg,
        r##"<text x="{left}" y="{}" font-size="14" font-weight="bold">{title}</text>"##,
        top - 8.0
    );
    let _ = writeln!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{plot_w}" height="{PANEL}" fill="none" stroke="#999"/>"##
    );
    for (i, (name, colour, points)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    left + x / x_max * plot_w,
                    bottom - y / y_max * PANEL
                )
            })
            .collect();
        let _ = writeln!(
            svg,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"##,
            path.join(" ")
        );
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" font-size="11" fill="{colour}">{name}</text>"##,
            left + 8.0,
            top + 14.0 + 13.0 * i as f64
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="end">{:.1} {unit}</text>"##,
        left - 4.0,
        top + 10.0,
        y_max
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{bottom}" font-size="11" text-anchor="end">0</text>"##,
        left - 4.0
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"##,
        left + plot_w,
        bottom + 14.0,
        match x_axis {
            XAxis::Seconds => format!("{x_max:.2} s"),
            XAxis::Blocks => format!("block {x_max:.0}"),
        }
    );
}

/// `tally bench --flood --plot`: each dimension's price relative to its first block's, and
/// the mean fee of a transfer and of a flood transaction, over the blocks of the flood.
pub fn flood_svg(title: &str, report: &tally_bench::flood::FloodReport) -> String {
    use tally_chain::Dimension;
    const COLOURS: [&str; 5] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"];
    let Some(first) = report.blocks.first() else {
        return String::new();
    };
    let prices: Vec<Series<'_>> = Dimension::ALL
        .iter()
        .map(|&d| {
            let i = d as usize;
            let points = report
                .blocks
                .iter()
                .enumerate()
                .map(|(n, b)| (n as f64, b.prices[i] as f64 / first.prices[i].max(1) as f64))
                .collect();
            (d.name(), COLOURS[i], points)
        })
        .collect();
    let fees = vec![
        (
            "a transfer",
            COLOURS[0],
            report
                .blocks
                .iter()
                .enumerate()
                .map(|(n, b)| (n as f64, b.transfer_fee))
                .collect(),
        ),
        (
            "a flood transaction that kept its keys (0: none did)",
            COLOURS[3],
            report
                .blocks
                .iter()
                .enumerate()
                .map(|(n, b)| (n as f64, b.flood_fee / 1e3))
                .collect(),
        ),
    ];
    let height = 2.0 * PANEL + 3.0 * MARGIN;
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="{MARGIN}" y="20" font-size="13">{title}</text>
"##
    );
    series_panel(
        &mut svg,
        MARGIN,
        "price of each dimension, relative to block 1",
        "x",
        &prices,
        XAxis::Blocks,
    );
    series_panel(
        &mut svg,
        2.0 * MARGIN + PANEL,
        "mean fee paid: a transfer (coins), a flood transaction (thousands of coins)",
        "",
        &fees,
        XAxis::Blocks,
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plot_has_one_point_per_block_and_is_well_formed() {
        let point = |tps, mib: u64| super::BlockPoint {
            tps,
            rss_bytes: mib << 20,
            disk_bytes: (2 * mib) << 20,
        };
        let svg = super::svg(
            "t",
            10,
            25,
            &[point(100.0, 1), point(200.0, 2), point(50.0, 3)],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        // Transfers/s, memory and disk.
        assert_eq!(svg.matches("<polyline").count(), 3);
        // 10 transfers at 100/s, 10 at 200/s, 5 at 50/s: the run lasts 0.25 s.
        assert!(svg.contains("0.25 s"), "{svg}");
    }
}
