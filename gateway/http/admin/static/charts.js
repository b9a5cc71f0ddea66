// Small charts drawn as inline SVG with the DOM: one line per series over the
// minutes of the metrics window. No library; labels are text nodes.
'use strict';

import {clear, svg} from './dom.js';

const W = 420;
const H = 190;
const PAD = {left: 40, right: 10, top: 10, bottom: 42};

function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

function hhmm(ms) {
  const d = new Date(ms);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

function short(value) {
  if (value >= 1e6) return `${+(value / 1e6).toPrecision(2)}M`;
  if (value >= 1e3) return `${+(value / 1e3).toPrecision(2)}k`;
  return String(+value.toPrecision(2));
}

/**
 * Draw a line chart into container.
 * minutes: the x values (epoch ms); series: [{name, values (numbers or null), cls}].
 */
export function lineChart(container, {minutes, series, unit = '', empty = 'nothing yet'}) {
  clear(container);
  const all = series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined));
  const top = niceMax(Math.max(0, ...all));
  const n = Math.max(minutes.length, 2);
  const x = (i) => PAD.left + (i * (W - PAD.left - PAD.right)) / (n - 1);
  const y = (v) => PAD.top + (1 - v / top) * (H - PAD.top - PAD.bottom);
  const chart = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img'});
  for (const fraction of [0, 0.5, 1]) {
    const value = top * fraction;
    chart.append(
      svg('line', {x1: PAD.left, x2: W - PAD.right, y1: y(value), y2: y(value), class: 'grid'}),
      svg('text', {x: PAD.left - 6, y: y(value) + 4, class: 'axis', 'text-anchor': 'end',
        text: short(value)}),
    );
  }
  const ticks = minutes.length > 1 ? [0, Math.floor((minutes.length - 1) / 2), minutes.length - 1] : [0];
  ticks.forEach((i, n) => {
    if (minutes[i] === undefined) return;
    const anchor = n === 0 ? 'start' : n === ticks.length - 1 ? 'end' : 'middle';
    chart.append(svg('text', {x: x(i), y: H - PAD.bottom + 16, class: 'axis',
      'text-anchor': anchor, text: hhmm(minutes[i])}));
  });
  let legendX = PAD.left;
  series.forEach((line, index) => {
    const cls = line.cls || `s${index}`;
    let segment = [];
    const segments = [];
    line.values.forEach((value, i) => {
      if (value === null || value === undefined) {
        if (segment.length) segments.push(segment);
        segment = [];
      } else {
        segment.push(`${x(i).toFixed(1)},${y(value).toFixed(1)}`);
      }
    });
    if (segment.length) segments.push(segment);
    for (const points of segments) {
      if (points.length === 1) {
        const [px, py] = points[0].split(',');
        chart.append(svg('circle', {cx: px, cy: py, r: 2.5, class: `dot ${cls}`}));
      } else {
        chart.append(svg('polyline', {points: points.join(' '), class: `line ${cls}`},
          svg('title', {text: line.name})));
      }
    }
    const label = `${line.name}${unit ? ` (${unit})` : ''}`;
    chart.append(
      svg('rect', {x: legendX, y: H - 13, width: 10, height: 4, class: `key ${cls}`}),
      svg('text', {x: legendX + 14, y: H - 8, class: 'legend', text: label}),
    );
    legendX += 24 + label.length * 6.5;
  });
  if (!all.some((v) => v > 0)) {
    chart.append(svg('text', {x: (PAD.left + W - PAD.right) / 2, y: (PAD.top + H - PAD.bottom) / 2,
      class: 'empty', 'text-anchor': 'middle', text: empty}));
  }
  container.append(chart);
  return chart;
}
