set terminal pngcairo size 900,500 noenhanced
set output 'bench/results/quick-20261121-2120-throughput.png'
set title 'Throughput per context (/gN = N generators per node)'
set xlabel '3 nodes, 2 generators/node, 10000 subscribers, 50% reads, ram_copies'
set style fill solid 0.6
set boxwidth 0.6
set ylabel 'ops/s (all nodes)'
set xtics rotate by -20
set yrange [0:*]
plot 'bench/results/quick-20261121-2120-points.dat' using 0:2:xtic(1) with boxes notitle
set terminal pngcairo size 900,500 noenhanced
set output 'bench/results/quick-20261121-2120-latency.png'
set title 'Latency per context (/gN = N generators per node)'
set ylabel 'microseconds'
set logscale y
set style data histogram
set style histogram cluster gap 1
set yrange [*:*]
plot 'bench/results/quick-20261121-2120-points.dat' using 4:xtic(1) title 'p50', '' using 5 title 'p95', '' using 6 title 'p99', '' using 3 title 'mean'
unset logscale y
set style data lines
set terminal pngcairo size 900,500 noenhanced
set output 'bench/results/quick-20261121-2120-timeline.png'
set title 'Throughput per second, real partition of the last node from 3 s to 7 s'
set object 1 rect from 3, graph 0 to 7, graph 1 fc rgb '#eeeeee' behind
set xlabel 'seconds'
set ylabel 'ops/s (all nodes)'
set xtics auto rotate by 0
set yrange [0:*]
plot 'bench/results/quick-20261121-2120-timeline.dat' using 1:2 with linespoints title 'transaction', 'bench/results/quick-20261121-2120-timeline.dat' using 1:3 with linespoints title 'sync_dirty', 'bench/results/quick-20261121-2120-timeline.dat' using 1:4 with linespoints title 'async_dirty', 'bench/results/quick-20261121-2120-timeline.dat' using 1:5 with linespoints title 'async_ec_pawset', 'bench/results/quick-20261121-2120-timeline.dat' using 1:6 with linespoints title 'async_ec_prwset'
unset object 1
