%% @doc The Markdown of a `make bench' run: the machine, the figures (points, ratios,
%% timelines, speed, the simple workload, where the CPU goes, sweeps) and the diagnostics.
-module(hm_bench_md).

-export([machine_md/1, diagnostics_md/1, figures_md/2]).

-import(hm_bench_lib, [merge_add/2, fmt/2, ctx_name/1, contexts/0, worst/1]).

-include("hm_bench.hrl").

%% Where the EC table processes' time went after the heal, by kind of step (the first run
%% of each EC timeline): the report's summary of heal_steps/2.
heal_steps_summary(TLs) ->
    Rows = [{N, K, C, Ms, R} || #{context := N, heal_steps := Steps} <- TLs,
                                {K, C, Ms, R} <- hm_bench_targets:heal_step_sums(Steps)],
    case Rows of
        [] -> [];
        _ ->
            [io_lib:format("~nSteps of the EC table processes of ~w ms or more from the heal to "
                           "the end of the timeline (first run; every step in the run's .md), "
                           "by what they handled: `merge` joins a member's state, `merge_req` "
                           "builds this copy's for a member, `acknowledge` and `tick` fold "
                           "stable metadata and retransmit, `ops` applies members' operations, `submit` "
                           "takes a write of the node's own writers. "
                           "Wall time includes waiting for a core: three nodes share two.~n~n"
                           "| context | step | steps | wall time summed | reductions "
                           "(millions) |~n|---|---|---|---|---|~n", [?SLOW_STEP_MS]),
             [io_lib:format("| ~s | ~s | ~w | ~w ms | ~.1f |~n", [N, K, C, Ms, R / 1.0e6])
              || {N, K, C, Ms, R} <- lists:sort(fun({N1, _, _, _, R1}, {N2, _, _, _, R2}) ->
                                                         {N1, -R1} =< {N2, -R2}
                                                 end, Rows)]]
    end.

%% Every step of heal_steps/2, for the run's .md.
heal_steps_list(TLs) ->
    [[io_lib:format("~n~s: steps of the EC table processes of ~w ms or more, from half a "
                    "second before the heal (ms from the heal, node, table, step, wall time, "
                    "reductions):~n~n| at | node | table | step | ms | reductions |~n"
                    "|---|---|---|---|---|---|~n", [N, ?SLOW_STEP_MS]),
      [io_lib:format("| ~w | ~w | ~s | ~s | ~w | ~w |~n",
                     [At, I, Tab, K, Ms, R])
       || #{at_ms := At, node := I, table := Tab, kind := K, ms := Ms, reductions := R} <- Steps]]
     || #{context := N, heal_steps := Steps} <- TLs, Steps =/= []].

%%% ============================================================= Markdown

%% @doc The machine a run ran on (machine/0, with `loadavg_start'), as a line of its Markdown.
-spec machine_md(map()) -> iodata().
machine_md(M) ->
    io_lib:format("- **Machine:** ~w cores (~w schedulers per node), ~s, Erlang/OTP ~s "
                  "(ERTS ~s), Mnesia ~s. Load average (1, 5, 15 min) at the start `~s`, at the "
                  "end `~s`: every node and the generators share these cores with whatever "
                  "else runs, so compare ratios within a run, not absolute ops/s.~n",
                  [maps:get(cores, M, 0), maps:get(schedulers, M, 0), maps:get(uname, M, ""),
                   maps:get(otp_version, M, maps:get(otp, M, "")), maps:get(erts, M, ""),
                   maps:get(mnesia, M, ""), maps:get(loadavg_start, M, "?"),
                   maps:get(loadavg_end, M, "?")]).

%% @doc The figures of a run: what REPORT.md's generated section for the profile holds, and the
%% head of the run's own .md. `Rel' is the path from the Markdown file to the results.
-spec figures_md(map(), iodata()) -> iodata().
figures_md(Out, Rel) ->
    Id = maps:get(run_id, Out, <<"(unknown run)">>),
    Pts = [X || X = #{nodes := 3} <- maps:get(points, Out)],
    M = maps:get(machine, Out, #{}),
    Cfg = maps:get(config, Out),
    Link = fun(Label, Suffix) -> io_lib:format("[~s](~s~s~s)", [Label, Rel, Id, Suffix]) end,
    Tot = maps:get(timeline_s, Cfg, null),
    [io_lib:format("### Run `~s` (generated from that run)~n~n", [Id]),
     io_lib:format("- **Started:** ~s. **Command:** `~s`.~n",
                   [maps:get(started, Out, maps:get(date, Out, "")), maps:get(command, Out, "")]),
     machine_md(M),
     io_lib:format("- **Wall time:** ~s from the start of `make` to this report, build included "
                   "(the benchmark run alone: ~s).~n",
                   [fmt(maps:get(make_wall_s, Out, null), s),
                    fmt(maps:get(run_wall_s, Out, maps:get(wall_s, Out, null)), s)]),
     io_lib:format("- **Profile:** ~s; warm-up ~w ms, measurement ~w ms per point; partition "
                   "timeline ~s s, the last node cut off from second ~s to ~s; HM_BENCH_SCALE "
                   "~s.~n",
                   [hm_bench_report:profile_title(Out), maps:get(warm_ms, Cfg),
                    maps:get(measure_ms, Cfg),
                    fmt(Tot, f), fmt(tl_cut(Tot, 1), f), fmt(tl_cut(Tot, 2), f),
                    fmt(maps:get(scale, Out, 1), g)]),
     ["- **Files:** raw results ", Link("JSON", ".json"), ", every table with the diagnostics ",
      Link("Markdown", ".md"), ", plots ", Link("throughput", "-throughput.png"), ", ",
      Link("latency", "-latency.png"), ", ", Link("timeline", "-timeline.png"),
      [[", ", Link(io_lib:format("sweep ~s", [K]), io_lib:format("-sweep-~s.png", [K]))]
       || #{param := K} <- maps:get(sweeps, Out, [])], ".\n\n"],
     "#### Ratios (3 nodes)\n\n", ratio_table(Pts),
     "\n#### Targets (computed from this run)\n\n",
     hm_bench_targets:targets_table(Pts, maps:get(timelines, Out), maps:get(speed, Out, [])),
     hm_bench_targets:nodes_target(maps:get(sweeps, Out, [])),
     hm_bench_targets:why_md(Out),
     "\n#### Throughput and latency\n\n", points_table(Pts, Cfg),
     [["\n#### CPU per write, stability backlog, memory (EC against async_dirty and the floor)\n\n",
       speed_table(Speed, Cfg)] || Speed <- [maps:get(speed, Out, [])], Speed =/= []],
     [["\n#### Simple workload (every point)\n\n", simple_table(Simple, Cfg)]
      || Simple <- [maps:get(simple_points, Out, [])], Simple =/= []],
     [["\n#### Where the CPU goes (simple workload, per write, the three nodes together)\n\n",
       where_table(Simple)]
      || Simple <- [[X || X = #{where := _} <- maps:get(simple_points, Out, [])]], Simple =/= []],
     "\n#### Partition timeline (ops/s summed over the nodes)\n\n",
     timeline_table(maps:get(timelines, Out), Cfg),
     io_lib:format("~n![timeline](~s~s-timeline.png)~n", [Rel, Id]),
     heal_steps_summary(maps:get(timelines, Out)),
     [["\n#### Sweeps (throughput, ops/s; one parameter varies, the others as above)\n",
       [sweep_table(S) || S <- Sweeps]] || Sweeps <- [maps:get(sweeps, Out, [])], Sweeps =/= []]].

%% @doc The rest of a run's .md: per-second timelines and the profiling evidence.
-spec diagnostics_md(map()) -> iodata().
diagnostics_md(Out) ->
    Amp = maps:get(amplification, Out, #{node => 0, received_by_kind => #{},
                                         remote_ops_delivered => 0,
                                         op_messages_per_remote_op => null}),
    Good = [T || T = #{per_sec := _} <- maps:get(timelines, Out)],
    PerSecT = case Good of
                  [] -> [];
                  [#{per_sec := PS0} | _] ->
                      ["\n| second | ", lists:join(" | ", [N || #{context := N} <- Good]),
                       " |\n|---|", [["---|"] || _ <- Good], "\n",
                       [["| ", integer_to_list(Sec), " | ",
                         lists:join(" | ", [integer_to_list(lists:nth(Sec + 1, PS))
                                            || #{per_sec := PS} <- Good]), " |\n"]
                        || Sec <- lists:seq(0, length(PS0) - 1)]]
              end,
    Costs = [io_lib:format("| ~s | ~.2f |~n", [K, V])
             || {K, V} <- lists:sort(maps:to_list(maps:get(costs, Out)))],
    Q = [io_lib:format("| ~s | ~w | ~w | ~s | ~w |~n",
                       [N, G, [maps:get(queue_max, S, 0) || S <- Sm],
                        lists:join(" ", [fmt(maps:get(queue_mean, S, 0), f) || S <- Sm]),
                        [round(100 * R) || R <- Sh]])
         || #{context := N, gens_per_node := G, ec_server_queue := Sm,
              ec_server_reduction_share := Sh} <- maps:get(points, Out),
            binary:match(N, <<"ec">>) =/= nomatch],
    %% per node: whether one node falls behind on the others' operations while they run
    PerNodeT = [[io_lib:format("~n~s, per node (1 / 2 / ... ; the last one is cut off from "
                               "second ~w to ~w): operations per second, and the most "
                               "operations of other members queued in the node's EC table "
                               "processes (received, not applied yet) in that second:~n~n"
                               "| second | ops/s per node | queued per node |~n|---|---|---|~n",
                               [N, From, To]),
                 [io_lib:format("| ~w | ~s | ~s |~n",
                                [Sec, lists:join(" / ", [integer_to_list(lists:nth(Sec + 1, P))
                                                         || P <- PN]),
                                 lists:join(" / ", [integer_to_list(lists:nth(Sec + 1, R))
                                                    || R <- RQ])])
                  || Sec <- lists:seq(0, length(hd(PN)) - 1)]]
                || #{context := N, per_node_per_sec := PN, partition_s := [From, To],
                     ec_remote_queued_max_per_node_per_sec := RQ} <- Good,
                   binary:match(N, <<"ec">>) =/= nomatch, PN =/= [], RQ =/= []],
    ["\n### Diagnostics\n\nPartition timeline, ops/s per second:\n", PerSecT, PerNodeT,
     heal_steps_list(maps:get(timelines, Out)),
     "\n| EC write step (node 1, idle) | us per call |\n|---|---|\n", Costs,
     "\n| context | gens/node | EC processes: longest queue, max per node | mean per node | EC processes' share of node reductions % |\n",
     "|---|---|---|---|---|\n", Q,
     io_lib:format("~nRetransmission amplification (node ~w, one load window then quiescence): "
                   "~w op messages received for ~w remote operations delivered = ~s per "
                   "operation; all messages by kind: ~0p~n",
                   [maps:get(node, Amp), maps:get(op, maps:get(received_by_kind, Amp), 0),
                    maps:get(remote_ops_delivered, Amp),
                    fmt(maps:get(op_messages_per_remote_op, Amp), x),
                    maps:get(received_by_kind, Amp)]),
     "\neprof of the EC processes (server and tables) on node 1 (1.5 s under load, in the same window), last lines:\n\n```\n",
     lists:join("\n", maps:get(eprof, Out)), "\n```\n"].

ratio_table(Pts) ->
    ["| EC context | gens/node | EC / transaction | EC / async_dirty | space overhead | "
     "convergence after stop | quiescence |\n|---|---|---|---|---|---|---|\n",
     [io_lib:format("| ~s | ~w | ~s | ~s | ~s | ~s | ~s |~n",
                    [E, G, fmt(hm_bench_targets:ratio(Pts, E, <<"transaction">>, G), x),
                     fmt(hm_bench_targets:ratio(Pts, E, <<"async_dirty">>, G), x),
                     fmt(Sp, pct), fmt(Cv, ms), fmt(Qu, ms)])
      || #{context := E, gens_per_node := G, space_overhead := Sp, convergence_ms := Cv,
           quiescence_ms := Qu} <- hm_bench_targets:ec_points(Pts)]].

points_table(Pts, Cfg) ->
    ["| context | gens/node | ops/s | mean us | p50 us | p95 us | p99 us | errors | retries | "
     "space overhead | convergence | quiescence |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
     [io_lib:format("| ~s | ~w | ~s | ~s | ~s | ~s | ~s | ~w | ~w | ~s | ~s | ~ts |~n",
                    [N, G, fmt(T, f)] ++ [fmt(maps:get(K, L, null), f)
                                          || K <- [mean_us, p50_us, p95_us, p99_us]]
                    ++ [E, R, fmt(Sp, pct), fmt(Cv, ms),
                        case lists:member(N, ?EC) of true -> fmt(Qu, ms); false -> "–" end])
      || #{context := N, gens_per_node := G, throughput_ops_s := T, latency := L, errors := E,
           retries := R, space_overhead := Sp, convergence_ms := Cv, quiescence_ms := Qu}
             <- Pts],
     io_lib:format("~nconvergence n/a: the replicas were still different when the cool-down "
                   "wait ended (~s for EC, ~s for the others). Plain Mnesia's dirty contexts "
                   "have no conflict resolution and may never converge; for EC it is a miss. "
                   "Quiescence (EC only): no buffered and no unstable operation left on any "
                   "node, waited for up to ~s more (n/a: not reached).~n",
                   [fmt(ms_s(maps:get(conv_ms, Cfg, null)), s),
                    fmt(ms_s(maps:get(dirty_conv_ms, Cfg, null)), s),
                    fmt(ms_s(maps:get(conv_ms, Cfg, null)), s)])].

ms_s(null) -> null;
ms_s(Ms) -> Ms / 1000.

timeline_table(TLs, Cfg) ->
    Rel = fun(A, B) when is_number(A), is_number(B), B > 0 -> A / B; (_, _) -> null end,
    ["| context | before | during the cut | after the heal | during / before | after / before "
     "| errors | convergence after heal | after the generators stop |\n"
     "|---|---|---|---|---|---|---|---|---|\n",
     [io_lib:format("| ~s | ~s | ~s | ~s | ~s | ~s | ~w | ~s | ~s |~n",
                    [N, fmt(B, f), fmt(D, f), fmt(A, f), fmt(Rel(D, B), x), fmt(Rel(A, B), x),
                     E, fmt(H, ms), fmt(maps:get(converged_ms_after_stop, T, null), ms)])
      || T = #{context := N, before_ops_s := B, during_ops_s := D, after_ops_s := A,
               errors := E, converged_ms_after_heal := H} <- TLs],
     io_lib:format("~nMeans of whole seconds: before = seconds 1 to the cut; during = the cut "
                   "without its first and last second; after = from 2 s after the heal to the "
                   "end. Convergence: every node's contents equal, measured from the heal and "
                   "from the moment the generators stopped (they run to the end of the "
                   "timeline). n/a: not within the wait (~s for EC, ~s for the others; a "
                   "partition leaves plain Mnesia's replicas diverged for good)."
                   "~n", [fmt(ms_s(maps:get(heal_conv_ms, Cfg, null)), s),
                          fmt(ms_s(maps:get(dirty_conv_ms, Cfg, null)), s)])].

%% EC against async_dirty and the floor, per workload, EC type and generators per node
speed_table(Speed, Cfg) ->
    S = maps:get(simple, Cfg, #{}),
    ["| workload | EC | gens/node | EC / async_dirty ops/s | CPU us per write: EC | "
     "async_dirty | floor | EC / async_dirty CPU | EC / floor CPU | unstable ops at stop | "
     "back to 0 after | catch-ups by state | EC table processes' peak memory (all; largest) | "
     "space / plain table |\n"
     "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
     [io_lib:format("| ~s | ~s | ~w | ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~w | ~s; ~s | ~s |~n",
                    [W, hm_bench_targets:short(E), G,
                     [fmt(maps:get(ec_vs_dirty_throughput, R), x),
                      case maps:get(ec_vs_dirty_throughput_by_round, R, []) of
                          L when length(L) > 1 ->
                              [" (rounds: ", lists:join(", ", [fmt(V, x) || V <- L]), ")"];
                          _ -> ""
                      end],
                     fmt1(maps:get(cpu_us_per_write, R)), fmt1(maps:get(dirty_cpu_us_per_write, R)),
                     fmt1(maps:get(floor_cpu_us_per_write, R)),
                     fmt(maps:get(ec_vs_dirty_cpu, R), x), fmt(maps:get(ec_vs_floor_cpu, R), x),
                     fmt(maps:get(unstable_at_stop, R), f), fmt(maps:get(unstable_drain_ms, R), ms),
                     maps:get(state_catch_ups, R, 0),
                     fmt(maps:get(table_procs_memory_peak_bytes, R), mb),
                     fmt(maps:get(table_proc_memory_peak_bytes, R), mb),
                     fmt(maps:get(space_ratio, R), x)])
      || R = #{workload := W, context := E, gens_per_node := G} <- Speed],
     io_lib:format(
       "~nWorkloads: `bench` is Mnesia's bench workload above (its points); `simple` is one table "
       "of ~s records `{kv, K, V}`, ~s % `mnesia:write({kv, K, V})` of random keys and the rest "
       "reads, each context measured ~s times in a row (the table above: mean throughput, CPU "
       "over all rounds, the worst round for the rest). CPU per write: `erlang:statistics(runtime)` "
       "of the three VMs, from the start of the load (warm-up included) until each node is idle "
       "again (no message waiting in a Mnesia or Hypermnesia process and, for EC, no buffered or "
       "unstable operation, for ~w ms), summed over the nodes, divided by the records written "
       "(bench: t1 writes 1, t4 and t5 3 when allowed; reads, misses and denied requests count "
       "in the CPU, not in the writes). The floor: the simple workload with no Mnesia, each write "
       "one `ets:insert` on the generator's node and one message per peer whose receiver does the "
       "same insert, measured the same way at the same generators per node. Every context's CPU "
       "includes the generators' own loop and the benchmark's 20 ms samplers and polls. "
       "Unstable ops at stop: `unstable_ops` of hypermnesia:info/1 summed over the nodes when the "
       "generators stopped; back to 0 after: until no node has any. Catch-ups by state: "
       "`state_catch_ups` of hypermnesia:info/1 after quiescence, summed over the nodes and "
       "rounds (a copy far behind took a member's state instead of its operations). Peak memory: "
       "`erlang:process_info(P, memory)` of the EC table processes every 20 ms, the peak of their "
       "sum on a node and of the largest one. Space: after quiescence, the EC table with its "
       "metadata and log over a plain ETS set of the same records (mean over the nodes).~n",
       [fmt(maps:get(keys, S, null), g), fmt(maps:get(write_pct, S, null), g),
        fmt(maps:get(rounds, S, null), g), ?IDLE_STREAK_MS]),
     io_lib:format("~nThe cool-down's hash polls (every 20 ms on every node until the copies are "
                   "equal) ran inside the CPU counted for at most ~s of a point's CPU (their wall "
                   "time, an upper bound).~n",
                   [fmt(worst([maps:get(hash_poll_share_max, R, null) || R <- Speed]), pct)])].

simple_table(Pts, Cfg) ->
    S = maps:get(simple, Cfg, #{}),
    [io_lib:format("~s keys, ~s % writes, warm-up ~s ms, measurement ~s ms per point, in the "
                   "order measured.~n~n",
                   [fmt(maps:get(keys, S, null), g), fmt(maps:get(write_pct, S, null), g),
                    fmt(maps:get(warm_ms, S, null), g), fmt(maps:get(measure_ms, S, null), g)]),
     "| context | gens/node | round | ops/s | p50 us | p99 us | errors | CPU us per write | "
     "unstable ops at stop | back to 0 after | idle after | table processes' peak memory | "
     "space / plain | convergence | quiescence |\n"
     "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
     [begin
          Cpu = maps:get(cpu, X, #{}),
          EC = lists:member(N, ?EC),
          Dash = fun(true, V) -> V; (false, _) -> "–" end,
          io_lib:format("| ~s | ~w | ~w | ~s | ~s | ~s | ~w | ~s | ~ts | ~ts | ~s | ~ts | ~ts | ~ts | ~ts |~n",
                        [N, G, maps:get(round, X, 1), fmt(T, f),
                         fmt(maps:get(p50_us, L, null), f), fmt(maps:get(p99_us, L, null), f), E,
                         fmt1(maps:get(cpu_us_per_write, Cpu, null)),
                         Dash(EC, fmt(maps:get(unstable_at_stop, Cpu, null), f)),
                         Dash(EC, fmt(maps:get(unstable_drain_ms, Cpu, null), ms)),
                         fmt(maps:get(idle_ms_after_stop, Cpu, null), ms),
                         Dash(EC, fmt(maps:get(table_procs_memory_peak_bytes, X, null), mb)),
                         Dash(N =/= <<"floor">>, fmt(maps:get(space_ratio, X, null), x)),
                         Dash(N =/= <<"floor">>, fmt(maps:get(convergence_ms, X, null), ms)),
                         Dash(EC, fmt(maps:get(quiescence_ms, X, null), ms))])
      end || X = #{context := N, gens_per_node := G, throughput_ops_s := T, latency := L,
                   errors := E} <- Pts],
     "\nidle after: from the generators' stop until the last node was idle (n/a: not within "
     "the cool-down waits; its CPU is then counted up to the end of the waits).\n"].

%% The simple workload's CPU per write by scheduler state and by kind of process, each context
%% and generator count over its rounds: microstate accounting (time) and reductions (work).
where_table(Pts) ->
    Keys = lists:usort([{G, N} || #{context := N, gens_per_node := G} <- Pts]),
    States = [emulator, gc, port, check_io],
    Kinds = [exited, ec_table, mnesia_tm, mnesia_other, hm_other, floor_receiver, bench],
    ["| context | gens/node | CPU us per write | ",
     lists:join(" | ", ["time %: " ++ atom_to_list(S) || S <- States]), " | time %: other | ",
     lists:join(" | ", ["reductions: " ++ where_label(K) || K <- Kinds]), " | reductions: other |\n",
     "|---|---|---|", [["---|"] || _ <- States], "---|", [["---|"] || _ <- Kinds], "---|\n",
     [begin
          Sel = [X || X = #{context := N1, gens_per_node := G1} <- Pts, N1 =:= N, G1 =:= G],
          {W, Rd} = hm_bench_targets:where_sums(Sel),
          CpuMs = lists:sum([maps:get(cpu_ms, maps:get(cpu, X), 0) || X <- Sel]),
          Us = lists:foldl(fun(#{where := #{msacc_us := M}}, A) -> merge_add(M, A) end, #{}, Sel),
          Per = fun(V) when W > 0 -> fmt1(V / W); (_) -> "n/a" end,
          Busy = lists:sum(maps:values(Us)),
          Pct = fun(V) when Busy > 0 -> fmt1(100 * V / Busy); (_) -> "n/a" end,
          Rest = fun(M, Named) -> lists:sum([V || {K, V} <- maps:to_list(M),
                                                  not lists:member(K, Named)]) end,
          io_lib:format("| ~s | ~w | ~s | ~s | ~s | ~s | ~s |~n",
                        [N, G, Per(1000 * CpuMs),
                         lists:join(" | ", [Pct(maps:get(S, Us, 0)) || S <- States]),
                         Pct(Rest(Us, States)),
                         lists:join(" | ", [Per(maps:get(K, Rd, 0)) || K <- Kinds]),
                         Per(Rest(Rd, Kinds))])
      end || {G, N} <- Keys],
     "\nTime %: the shares of the normal and dirty CPU schedulers' busy time by state "
     "(microstate accounting, `msacc`, of the three VMs; it counts wall time, so on an "
     "oversubscribed host only its shares mean something). `emulator`: running Erlang "
     "code, which includes the encoding of distribution messages at `send` and the ETS "
     "built-ins; `gc`: garbage collection; `port`: the distribution's sockets; other: "
     "`aux`, `other` (which includes schedulers spinning before they sleep) and the rest. "
     "Reductions per write (work, as counted by the VM), by the process that did it: the "
     "generators (exited by the end, with any other process that exited), the EC table "
     "processes, `mnesia_tm` (which applies other nodes' `async_dirty` writes), the rest of "
     "Mnesia, the rest of Hypermnesia, the floor's receiver, the benchmark's own samplers. "
     "Both from just before the load starts to the end of the cool-down (a little longer than "
     "the CPU column's window, which ends when the node is idle), over all rounds.\n"].

where_label(exited) -> "generators";
where_label(ec_table) -> "EC table";
where_label(floor_receiver) -> "floor receiver";
where_label(K) -> atom_to_list(K).

fmt1(null) -> "n/a";
fmt1(V) -> io_lib:format("~.1f", [float(V)]).

sweep_table(#{param := K, values := Vs, points := SP}) ->
    Ctxs = [ctx_name(C) || C <- contexts()],
    Get = fun(V, Cx, Key) -> hd([maps:get(Key, X) || X = #{value := V1, context := C1} <- SP,
                                                     V1 =:= V, C1 =:= Cx] ++ [null]) end,
    Tp = fun(V, Cx) -> Get(V, Cx, throughput_ops_s) end,
    R = fun(V, E) -> case {Tp(V, E), Tp(V, <<"async_dirty">>)} of
                         {X, Y} when is_number(X), is_number(Y), Y > 0 -> X / Y;
                         _ -> null
                     end end,
    [io_lib:format("~n| ~s | ", [K]), lists:join(" | ", Ctxs),
     " | EC / async_dirty | EC space overhead | EC convergence |\n|---", [["|---"] || _ <- Ctxs],
     "|---|---|---|\n",
     [["| ", val_md(V), [[" | ", fmt(Tp(V, Cx), f)] || Cx <- Ctxs],
       " | ", lists:join(" / ", [fmt(R(V, E), x) || E <- ?EC]),
       " | ", lists:join(" / ", [fmt(Get(V, E, space_overhead), pct) || E <- ?EC]),
       " | ", lists:join(" / ", [fmt(Get(V, E, convergence_ms), ms) || E <- ?EC]), " |\n"]
      || V <- Vs],
     "\nEC columns: pawset / prwset.\n"].

val_md(V) when is_binary(V) -> V;
val_md(V) -> io_lib:format("~w", [V]).

%% the cut of a timeline of Tot seconds: the middle third
tl_cut(null, _) -> null;
tl_cut(Tot, K) -> K * Tot div 3.
