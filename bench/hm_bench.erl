%% @doc `make bench' / `make bench-full': Mnesia's own benchmark workload (the
%% subscriber / group / server / session tables and the transaction types t1..t5, §5.3–5.4 of
%% the paper <em>Hypermnesia: Eventual Consistency in Mnesia</em>) run under five access
%% contexts in the same run: `transaction', `sync_dirty', `async_dirty', and `async_ec' on
%% `pawset' and on `prwset' EC tables. It measures what the
%% paper measures in §5.5–5.10: throughput and latency per context (§5.5–5.8), space overhead
%% after quiescence (§5.9), time to convergence, and throughput per second through a real
%% network partition (§5.10, Fig. 12). Beside it, in the same run, a simple workload (one table
%% `kv', 80 % `mnesia:write({kv, K, V})' of random keys, 20 % reads) under `async_dirty',
%% `async_ec' and a floor that only does one ETS insert and one message per peer per write;
%% and for every point the CPU time of the VMs per write (from the start of the load until
%% every node is idle again), the EC copies' unstable operations when the generators stop and
%% the time until there are none, the peak memory of the EC table processes, and the space
%% after quiescence against a plain set.
%%
%% This is an independent implementation of the workload's shape, not OTP's bench files.
%%
%% Every run has the four phases of the paper (§5.4): populate, warm-up, measure, cool-down.
%% Request generators are processes on every node; each runs its requests on its own node's
%% replica. The nodes are started by the project's peer-cluster harness (test/hm_cluster.erl:
%% OTP `peer' nodes controlled over standard I/O), and the partition is a real one
%% ({@link hm_cluster:cut/3}: per-side wrong cookies, then `disconnect_node'), healed by
%% restoring the cookies only ({@link hm_cluster:heal/2} without waiting): Hypermnesia
%% reconnects and re-joins Mnesia by itself.
%%
%% Each run writes `bench/results/<profile>-<date>.json' (the record), PNG plots (gnuplot),
%% `<profile>-<date>.md' (every table and the profiling evidence), and rewrites the section
%% of bench/REPORT.md between `<!-- BEGIN GENERATED <profile>' and `<!-- END GENERATED
%% <profile> -->' from the run (figures, machine, command, wall time, targets met or missed);
%% the hand-written rest of the report is kept. Profiles: `quick' (`make bench', about
%% 5 minutes), `full' (`make bench-full', every sweep, about 15 minutes), `amp' (the
%% retransmission amplification at 1, 2, 4 generators per node). HM_BENCH_SCALE=F scales
%% every phase for a smoke run written under `_build/bench/'.
%%
%% `make bench-netsplit' ({@link netsplit/1}) runs the partition timeline of the EC contexts
%% with the cut made both ways: clean as above, and silent, each node in a network namespace
%% of its own and every packet across the cut dropped, the connections up (Linux, as root).
%%
%% The migration the paper advertises is one line: every transaction type is a plain Mnesia
%% fun ({@link hm_bench_workload}), and {@link hm_bench_workload:run_in/2} runs it under a
%% context; `async_ec' only replaces `mnesia:activity(transaction, F)' by
%% `hypermnesia:async_ec(F)'.
%%
%% The modules: this one holds the profiles and the runs of a profile; {@link hm_bench_run}
%% one point and one partition timeline, and their summaries; {@link hm_bench_node} and
%% {@link hm_bench_probe} what runs on the peer nodes (tables, generators, idle watchers;
%% where the CPU goes); {@link hm_bench_md} and {@link hm_bench_targets} the Markdown tables
%% and the targets met or missed; {@link hm_bench_report} REPORT.md, the plots and the JSON
%% record; {@link hm_bench_lib} the cluster calls, clocks and formats they share.
-module(hm_bench).

-export([main/1, render/2, netsplit/1]).

-import(hm_bench_lib, [val_json/1, sub/3, fmt/2, ctx_name/1, cfg_json/1, with_cluster/2,
                       now_ms_sys/0, utf8/1, machine/0, clock/0, loadavg/0, date_string/0,
                       now_ms/0, contexts/0]).

-include("hm_bench.hrl").

%%% ============================================================= profiles
%%
%% Phase lengths below are for HM_BENCH_SCALE=1. The environment variable HM_BENCH_SCALE (a
%% positive number) multiplies every phase (warm-up, measurement, timeline, the diagnostics'
%% load window, the cool-down waits but the 60 s bound on EC's convergence after the
%% timeline's heal) and every subscriber count: `HM_BENCH_SCALE=0.1 make
%% bench-full' runs every sweep point in a few minutes, as a smoke test of the code paths. A
%% scaled run writes under `_build/bench/' (results/ and REPORT.md), never into bench/.

profile("quick") ->
    #{profile => quick, nodes => 3, gens => 2, subs => 10000, read_pct => 50,
      storage => ram_copies, warm_ms => 500, measure_ms => 3000,
      %% cool-down: how long to wait for equal replicas (plain Mnesia may never get there)
      %% and then for EC quiescence; bounded so that a miss cannot blow the 4 minutes. After
      %% the timeline's partition EC is waited for up to 60 s: its convergence time is a
      %% figure of the report, never n/a unless EC failed to converge.
      conv_ms => 5000, dirty_conv_ms => 2000, heal_conv_ms => 60000,
      %% the partition cuts the last node off during the middle third of the timeline
      timeline_s => 12,
      timeline_contexts => [transaction, async_dirty, {async_ec, pawset}, {async_ec, prwset}],
      %% an EC timeline runs this many times (each on a fresh cluster): the rate of the
      %% seconds after a heal moves by tens of per cent between runs on this host, so its
      %% target is judged on the median (the first run's per-second figures are shown)
      heal_runs => 3,
      diag_ms => 3000,
      contexts => contexts(),
      %% the 4-generators point of the EC >= 0.8x async_dirty target
      extra => [{4, [async_dirty, {async_ec, pawset}, {async_ec, prwset}]}],
      %% the second workload: one table of `keys' records {kv, K, V}, `write_pct' % writes
      %% of random keys (mnesia:write({kv, K, V})), the rest reads; every context at 2 and at
      %% 4 generators per node, the whole round of contexts measured `rounds' times in a row
      %% (async_dirty, pawset, prwset, floor, async_dirty, ...), so that EC and async_dirty
      %% alternate under whatever else loads the host. 2 s measured per point (the issue's
      %% 4 s, in bench-full): 16 points of 2 s keep `make bench' within about 4 minutes.
      simple => #{keys => 10000, write_pct => 80, gens => [2, 4], rounds => 2,
                  warm_ms => 500, measure_ms => 2000,
                  contexts => [async_dirty, {async_ec, pawset}, {async_ec, prwset}, floor]}};
profile("amp") ->
    %% retransmission amplification alone, at rising load (diagnostic for REPORT.md)
    (profile("quick"))#{profile => amp, amp_gens => [1, 2, 4]};
profile("full") ->
    Q = profile("quick"),
    Q#{profile => full, warm_ms => 1000, measure_ms => 4000, timeline_s => 30,
       conv_ms => 20000, timeline_contexts => contexts(), sweeps => env_sweeps(sweeps()),
       simple => (maps:get(simple, Q))#{warm_ms => 1000, measure_ms => 4000}}.

%% The sweeps of `bench-full': one parameter varies, the others stay at the quick point.
sweeps() ->
    [{gens, [1, 2, 4, 8]}, {nodes, [1, 3, 5, 7]}, {read_pct, [0, 20, 50, 80, 100]},
     {subs, [1000, 10000, 100000]}, {storage, [ram_copies, disc_copies]}].

%% HM_BENCH_SWEEPS (names separated by commas, e.g. `nodes,gens'): only those sweeps of
%% `bench-full'; unset or empty: all of them
env_sweeps(All) ->
    case os:getenv("HM_BENCH_SWEEPS", "") of
        "" -> All;
        S -> Names = string:lexemes(S, ", "),
             case [Sw || Sw = {K, _} <- All, lists:member(atom_to_list(K), Names)] of
                 [] -> erlang:error({bad_hm_bench_sweeps, S});
                 Some -> Some
             end
    end.

env_scale() ->
    case os:getenv("HM_BENCH_SCALE") of
        false -> 1;
        "" -> 1;
        S -> case string:to_float(S) of
                 {F, []} when F > 0 -> F;
                 _ -> case string:to_integer(S) of
                          {I, []} when I > 0 -> I;
                          _ -> erlang:error({bad_hm_bench_scale, S})
                      end
             end
    end.

scale(P, S) when S == 1 -> P#{scale => 1};
scale(P, S) ->
    Ms = fun(K, Min) -> max(Min, round(maps:get(K, P) * S)) end,
    Subs = fun(N) -> max(100, round(N * S)) end,
    Simple = maps:get(simple, P),
    SMs = fun(K, Min) -> max(Min, round(maps:get(K, Simple) * S)) end,
    P#{scale => S, warm_ms := Ms(warm_ms, 100), measure_ms := Ms(measure_ms, 500),
       simple := Simple#{warm_ms := SMs(warm_ms, 100), measure_ms := SMs(measure_ms, 500),
                         keys := Subs(maps:get(keys, Simple))},
       conv_ms := Ms(conv_ms, 1000), dirty_conv_ms := Ms(dirty_conv_ms, 500),
       diag_ms := Ms(diag_ms, 500),
       timeline_s := max(6, round(maps:get(timeline_s, P) * S)), subs := Subs(maps:get(subs, P)),
       sweeps => [case Sw of
                      {subs, Vs} -> {subs, [Subs(V) || V <- Vs]};
                      _ -> Sw
                  end || Sw <- maps:get(sweeps, P, [])]}.

%%% ============================================================= main

%% @doc `hm_bench:main(["quick"])' (`make bench'), `main(["full"])' (`make bench-full') or
%% `main(["amp"])': run the profile, then write `<results>/<profile>-<date>.json' (the raw
%% record), the PNG plots, `<results>/<profile>-<date>.md' (every table, diagnostics included)
%% and the generated section of REPORT.md for that profile; halt(1) on failure. Results go to
%% bench/ at scale 1 and to _build/bench/ when HM_BENCH_SCALE is set (see the profiles).
-spec main([string()]) -> ok.
main([Name]) ->
    Scale = env_scale(),
    P = scale(profile(Name), Scale),
    T0 = now_ms(),
    Date = date_string(),
    Load0 = loadavg(),
    Started = list_to_binary(clock()),
    Res = try run_profile(P)
          catch C:R:St -> io:format("BENCH FAILED: ~p:~p~n~p~n", [C, R, St]), error
          end,
    case Res of
        error -> erlang:halt(1);
        Out0 ->
            {Results, _} = hm_bench_report:out_dirs(Scale),
            ok = filelib:ensure_dir(filename:join(Results, "x")),
            Out = Out0#{profile => list_to_binary(Name), date => list_to_binary(Date),
                        started => Started,
                        run_id => list_to_binary(Name ++ "-" ++ Date), scale => Scale,
                        run_wall_s => (now_ms() - T0) / 1000,
                        machine => (machine())#{loadavg_start => Load0},
                        command => list_to_binary(command(Name, Scale))},
            Base = filename:join(Results, Name ++ "-" ++ Date),
            ok = file:write_file("/tmp/hm_bench_last_" ++ os:getpid() ++ ".bin",
                                 term_to_binary({Base, Out})),
            ok = render(Base, Out),
            io:format("wrote ~s.{json,md}, PNGs and the report (~.1f s)~n",
                      [Base, (now_ms() - T0) / 1000])
    end.

%% @doc Write a run's plots, its Markdown tables, the generated section of the report for its
%% profile, and last its JSON (with the wall time since `make' started, HM_BENCH_T0).
-spec render(string(), map()) -> ok.
render(Base, Out0) ->
    Out = Out0#{make_wall_s => make_wall_s()},
    ok = case Out of
             #{points := _} ->
                 ok = hm_bench_report:plots(Base, Out),
                 ok = file:write_file(Base ++ ".md", utf8([hm_bench_md:figures_md(Out, ""),
                                                           hm_bench_md:diagnostics_md(Out)])),
                 hm_bench_report:update_report(Base, Out);
             _ -> ok
         end,
    file:write_file(Base ++ ".json", hm_json:encode(hm_bench_report:json_term(Out))).

command(Name, Scale) ->
    Target = case Name of "quick" -> "make bench"; "full" -> "make bench-full"; _ -> "" end,
    Env = [case Scale == 1 of true -> ""; false -> io_lib:format("HM_BENCH_SCALE=~s ", [os:getenv("HM_BENCH_SCALE")]) end,
           case {Name, os:getenv("HM_BENCH_SWEEPS", "")} of
               {"full", Sw} when Sw =/= "" -> io_lib:format("HM_BENCH_SWEEPS=~s ", [Sw]);
               _ -> ""
           end],
    lists:flatten([Env, Target, " (erl -noshell -pa _build/default/lib/hypermnesia/ebin "
                   "_build/bench -eval 'hm_bench:main([\"", Name, "\"]), halt().')"]).

%% seconds since `make' started (the Makefile exports HM_BENCH_T0, ms since the epoch)
make_wall_s() ->
    case string:to_integer(os:getenv("HM_BENCH_T0", "")) of
        {T0, []} -> (now_ms_sys() - T0) / 1000;
        _ -> null
    end.

run_profile(P = #{profile := quick}) ->
    {Points, SimplePoints, Diag} =
        with_cluster(P, fun(C) ->
                                Base = [hm_bench_run:point(C, P, Ctx)
                                        || Ctx <- maps:get(contexts, P)],
                                Extra = [hm_bench_run:point(C, P#{gens := G}, Ctx)
                                         || {G, Ctxs} <- maps:get(extra, P, []), Ctx <- Ctxs],
                                Simple = simple_points(C, P),
                                Diag = hm_bench_run:ec_diagnostics(C, P, true),
                                {Base ++ Extra, Simple,
                                 Diag#{costs => hm_bench_run:ec_costs(C),
                                       steps => hm_bench_run:ec_step_profile(C, P)}}
                        end),
    %% each timeline on a fresh cluster: what a partition leaves behind in plain Mnesia
    %% (diverged replicas of the non-EC tables) must not leak into the next context
    Timelines = [hm_bench_run:timeline_runs(P, Ctx) || Ctx <- maps:get(timeline_contexts, P)],
    #{config => cfg_json(P), points => Points, simple_points => SimplePoints,
      speed => hm_bench_run:speed(Points, SimplePoints), costs => maps:get(costs, Diag),
      eprof => maps:get(eprof, Diag), step_profile => maps:get(steps, Diag),
      amplification => maps:get(amplification, Diag),
      timelines => Timelines};
run_profile(P = #{profile := amp}) ->
    with_cluster(P, fun(C) ->
                            #{config => cfg_json(maps:without([amp_gens], P)),
                              amplification_by_gens =>
                                  [(maps:get(amplification,
                                             hm_bench_run:ec_diagnostics(C, P#{gens := G},
                                                                         false)))#{
                                     gens_per_node => G} || G <- maps:get(amp_gens, P)]}
                    end);
run_profile(P = #{profile := full}) ->
    Base = run_profile(P#{profile := quick}),
    Sweeps = maps:get(sweeps, P),
    %% every point a sweep needs, once: the quick point recurs in every sweep
    Memo0 = maps:from_list([{point_key(X), X} || X <- maps:get(points, Base)]),
    Todo = lists:usort([{maps:get(nodes, Q), point_key(Q, Ctx), Q, Ctx}
                        || {K, Vs} <- Sweeps, V <- Vs, Q <- [maps:put(K, V, P)],
                           Ctx <- contexts(), not maps:is_key(point_key(Q, Ctx), Memo0)]),
    Memo = lists:foldl(
             fun(N, M) ->
                     io:format("~s == sweep points on ~w nodes~n", [clock(), N]),
                     with_cluster(P#{nodes := N},
                                  fun(C) ->
                                          lists:foldl(fun({_, Key, Q, Ctx}, M1) ->
                                                              Pt = hm_bench_run:point(C, Q, Ctx),
                                                              M1#{Key => Pt}
                                                      end, M, [T || T = {N1, _, _, _} <- Todo,
                                                                   N1 =:= N])
                                  end)
             end, Memo0, lists:usort([N || {N, _, _, _} <- Todo])),
    Base#{sweeps => [#{param => K, values => [val_json(V) || V <- Vs],
                       points => [(maps:get(point_key(Q, Ctx), Memo))#{param => K,
                                                                       value => val_json(V)}
                                  || V <- Vs, Q <- [maps:put(K, V, P)], Ctx <- contexts()]}
                     || {K, Vs} <- Sweeps]}.

%% The simple workload on the same cluster: for each generator count, every context once per
%% round, the rounds one after the other (so EC and async_dirty alternate).
simple_points(C, P) ->
    S = maps:get(simple, P),
    Q = P#{workload => simple, subs := maps:get(keys, S), read_pct := 100 - maps:get(write_pct, S),
           warm_ms := maps:get(warm_ms, S), measure_ms := maps:get(measure_ms, S)},
    [(hm_bench_run:point(C, Q#{gens := G}, Ctx))#{round => R}
     || G <- maps:get(gens, S), R <- lists:seq(1, maps:get(rounds, S)),
        Ctx <- maps:get(contexts, S)].

%% what identifies a point: the configuration and the context
point_key(Q, Ctx) ->
    {ctx_name(Ctx), maps:get(nodes, Q), maps:get(gens, Q), maps:get(subs, Q),
     maps:get(read_pct, Q), maps:get(storage, Q)}.
point_key(#{context := N, nodes := Nd, gens_per_node := G, subs := S, read_pct := R,
            storage := St}) ->
    {N, Nd, G, S, R, St}.

%%% ============================================================= clean and silent cuts

%% @doc `make bench-netsplit': the quick profile's partition timeline of `async_ec' on
%% `pawset' and `prwset', each with a clean cut (cookies and `disconnect_node': both sides
%% see `nodedown' at once) and with a silent one (network namespaces, packets dropped, the
%% connections up: no node notices a cut of 4 s), interleaved, 3 rounds, each on a fresh
%% cluster. Writes to `Out' (Markdown) per run: the rate from 2 s after the heal against
%% before the cut, each node's lowest second after the heal against its own rate before the
%% cut, and when every copy was the same after the generators stopped.
-spec netsplit([string()]) -> ok.
netsplit([Out]) ->
    P = (profile("quick"))#{heal_runs => 1},
    #{timeline_s := Tot} = P,
    To = 2 * Tot div 3,
    Started = clock(),
    Load0 = loadavg(),
    Runs = [begin
                os:putenv("HM_BENCH_NETWORK", case Cut of
                                                  clean -> "loopback";
                                                  silent -> "netns"
                                              end),
                T = hm_bench_run:timeline_runs(P, {async_ec, Type}),
                #{per_node_per_sec := PN, before_ops_s := B} = T,
                %% the windows of before_ops_s and after_ops_s (timeline/6), per node
                Lowest = [lists:min(sub(S, To + 3, Tot - To - 3))
                          / max(1, hm_bench_stats:mean(sub(S, 2, Tot div 3 - 1))) || S <- PN],
                io:format("~s ~s round ~w: after/before ~s, lowest node second after the heal ~s, "
                          "converged ~s after the stop~n",
                          [Type, Cut, R, fmt(hm_bench_run:rel_before(T, after_ops_s), x),
                           fmt(lists:min(Lowest), x),
                           fmt(maps:get(converged_ms_after_stop, T), ms)]),
                #{type => Type, cut => Cut, round => R, before => B,
                  after_over_before => hm_bench_run:rel_before(T, after_ops_s),
                  lowest => lists:min(Lowest),
                  conv_stop => maps:get(converged_ms_after_stop, T),
                  conv_heal => maps:get(converged_ms_after_heal, T)}
            end || R <- [1, 2, 3], Type <- [pawset, prwset], Cut <- [clean, silent]],
    os:unsetenv("HM_BENCH_NETWORK"),
    Id = filename:rootname(filename:basename(Out)),
    Rows = [io_lib:format("| ~s | ~s | ~s | ~s | ~s | ~s |~n",
                          [Type, Cut, join([fmt(A, x) || #{after_over_before := A} <- Rs]),
                           join([fmt(L, x) || #{lowest := L} <- Rs]),
                           join([fmt(C, ms) || #{conv_stop := C} <- Rs]),
                           join([fmt(C, ms) || #{conv_heal := C} <- Rs])])
            || Type <- [pawset, prwset], Cut <- [clean, silent],
               Rs <- [[X || X = #{type := T1, cut := C1} <- Runs, T1 =:= Type, C1 =:= Cut]]],
    ok = file:write_file(
           Out, [io_lib:format("# Clean and silent cuts (run `~s`)~n~n- **Started:** ~s. "
                               "**Command:** `make bench-netsplit`.~n~s"
                               "- **Timeline:** the quick profile's: ~w s, node 3 of 3 cut "
                               "off from second ~w to ~w, two generators per node; the "
                               "rounds interleaved, each on a fresh cluster.~n~n",
                               [Id, Started,
                                hm_bench_md:machine_md((machine())#{loadavg_start => Load0}),
                                Tot, Tot div 3, To]),
                 "| type | cut | after the heal / before the cut | each node's lowest second "
                 "after the heal / its rate before | every copy the same, from the "
                 "generators' stop | the same, from the heal |\n|---|---|---|---|---|---|\n",
                 Rows,
                 "\nRounds in order. After the heal: the mean rate from 2 s after the heal to "
                 "the end, summed over the nodes, against before the cut. Lowest second: of "
                 "every node, its lowest whole second from 2 s after the heal on, against its "
                 "own mean before the cut (0.00x: a node whose writers all but stopped for a "
                 "second). A clean cut gives the nodes wrong cookies and disconnects them; a "
                 "silent one drops every packet between them in their network namespaces, "
                 "and no node notices a cut shorter than `net_ticktime` (60 s).\n"]),
    io:format("wrote ~s~n", [Out]).

join(L) -> lists:join(", ", L).
