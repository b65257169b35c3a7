%% @doc `make bench-scale': EC tables at the sizes users run, against plain Mnesia in the same
%% run. Four peer nodes (test/hm_cluster.erl, named `scale<I>_<os pid>'); a table of `Rows'
%% records `{T, Key, <<100 bytes>>}' with `ram_copies' on nodes 1 to 3, filled from node 1;
%% then, while `Writers' unthrottled writer processes on node 2 write random keys:
%% <ol>
%% <li>a copy is added on node 4 (`add_table_copy'): the time until it holds every row;</li>
%% <li>node 3 is cut off for `CutS' seconds: the writers' rate during the cut;</li>
%% <li>the cut heals: the writers' rate in the 10 s after it; then the writers stop and, for
%% the EC table, the time (from the heal, and from the stop) until every copy has
%% delivered the same operations and holds the same rows.</li>
%% </ol>
%% Each node's memory (`erlang:memory(total)') is sampled every 500 ms; the report gives the
%% peak per node, overall and in each phase (fill, copy added, cut, heal until every copy is
%% equal), and the memory at the end of the cut. The plain table runs under
%% `mnesia:async_dirty' (after the heal its copies differ for good: Mnesia reports
%% `inconsistent_database'), the EC table (`pawset') under `hypermnesia:async_ec'. The
%% figures of both, and their ratios, go to `bench/results/scale-<date>.md'.
-module(scale_bench).

-export([main/1]).
%% run on the nodes
-export([fill/3, writer_start/3, writer_count/0, writer_stop/0, sampler_start/0,
         sampler_peak/0, sampler_phase/0, digest/1, memory_profile/0, table_probe/2]).

-define(VALUE_BYTES, 100).
-define(AFTER_HEAL_S, 10).
-define(SAMPLE_MS, 500).
-define(CONVERGE_TIMEOUT_MS, 1800000).
%% a step of an EC table process this long or longer is listed
-define(LONG_STEP_MS, 200).

%% @doc `main([Rows, CutS, Writers, Out])' (strings).
-spec main([string()]) -> no_return().
main([RowsS, CutS, WritersS, Out]) ->
    P = #{rows => list_to_integer(RowsS), cut_s => list_to_integer(CutS),
          writers => list_to_integer(WritersS)},
    io:format("scale bench: ~p~n", [P]),
    Plain = run(plain, P),
    Ec = run(ec, P),
    ok = filelib:ensure_dir(Out),
    ok = file:write_file(Out, report(P, Plain, Ec)),
    io:format("~s~nwritten to ~s~n", [report(P, Plain, Ec), Out]),
    halt(0).

%% One context on a cluster of its own (the other's memory is not counted).
run(Ctx, P = #{rows := Rows, cut_s := CutS, writers := W}) ->
    C = hm_cluster:start(#{nodes => 3, prefix => "scale", modules => [?MODULE]}),
    try
        I4 = hm_cluster:add_node(C),
        Nodes3 = [hm_cluster:node(C, I) || I <- [1, 2, 3]],
        Tab = table(Ctx),
        Ids = [1, 2, 3, I4],
        %% the EC table processes time their steps (read when each starts)
        _ = [ok = hm_cluster:call(C, I, application, set_env,
                                  [hypermnesia, slow_step_ms, ?LONG_STEP_MS]) || I <- Ids],
        Opts = [{attributes, [k, v]}, {ram_copies, Nodes3}],
        {atomic, ok} = case Ctx of
                           plain -> hm_cluster:call(C, 1, mnesia, create_table, [Tab, Opts]);
                           ec -> hm_cluster:call(C, 1, hypermnesia, create_table,
                                                 [Tab, [{type, pawset} | Opts]])
                       end,
        [ok = hm_cluster:call(C, I, ?MODULE, sampler_start, []) || I <- [1, 2, 3, I4]],
        {FillMs, ok} = timed(fun() -> hm_cluster:call(C, 1, ?MODULE, fill, [Ctx, Tab, Rows],
                                                      infinity) end),
        io:format("~p: ~b rows written in ~b ms~n", [Ctx, Rows, FillMs]),
        PhaseFill = phase_peaks(C, [1, 2, 3, I4]),
        ok = hm_cluster:call(C, 2, ?MODULE, writer_start, [Ctx, Tab, #{writers => W,
                                                                      keys => Rows}]),
        Rate0 = rate(C, 5000),
        %% a copy added while the writers run: until it holds every row
        N4 = hm_cluster:node(C, I4),
        StepsAdd0 = steps(C, Ctx, Tab, Ids),
        {AddMs, LoadMs} = timed(fun() -> add_copy(C, Ctx, Tab, N4, I4, Rows) end),
        io:format("~p: copy added in ~b ms (Mnesia's load ~b ms)~n", [Ctx, AddMs, LoadMs]),
        PhaseAdd = phase_peaks(C, [1, 2, 3, I4]),
        %% node 3 cut off
        Steps0 = steps(C, Ctx, Tab, Ids),
        ok = hm_cluster:cut(C, [3], [1, 2, I4]),
        RateCut = rate(C, CutS * 1000),
        MemCut = [hm_cluster:call(C, I, erlang, memory, [total]) || I <- [1, 2, 3, I4]],
        Profile = [hm_cluster:call(C, I, ?MODULE, memory_profile, []) || I <- [1, 2, 3, I4]],
        Steps1 = steps(C, Ctx, Tab, Ids),
        PhaseCut = phase_peaks(C, [1, 2, 3, I4]),
        HealT0 = erlang:monotonic_time(millisecond),
        ok = hm_cluster:heal(C),
        {RateHeal, Timeline} = after_heal(C, Ctx, Tab, [1, 2, 3, I4]),
        Steps2 = steps(C, Ctx, Tab, Ids),
        ok = hm_cluster:call(C, 2, ?MODULE, writer_stop, []),
        StopT0 = erlang:monotonic_time(millisecond),
        Converged = case Ctx of
                        ec -> converge_ms(C, Tab, [1, 2, 3, I4], HealT0);
                        plain -> not_applicable
                    end,
        AfterStop = case Converged of
                        not_applicable -> not_applicable;
                        _ -> Converged - (StopT0 - HealT0)
                    end,
        Peaks = [hm_cluster:call(C, I, ?MODULE, sampler_peak, []) || I <- [1, 2, 3, I4]],
        PhaseHeal = phase_peaks(C, [1, 2, 3, I4]),
        R = #{fill_ms => FillMs, rate_before => Rate0, add_copy_ms => AddMs,
              add_load_ms => LoadMs, steps_add => steps_between(StepsAdd0, Steps0),
              rate_cut => RateCut, rate_heal => RateHeal, converged_ms => Converged,
              converged_after_stop_ms => AfterStop,
              peak_mb => [mb(M) || M <- Peaks], cut_end_mb => [mb(M) || M <- MemCut],
              phase_peak_mb => [{fill, PhaseFill}, {add_copy, PhaseAdd}, {cut, PhaseCut},
                                {heal, PhaseHeal}],
              cut_end_profile => Profile, heal_timeline => Timeline,
              steps_cut => steps_between(Steps0, Steps1),
              steps_heal => steps_between(Steps1, Steps2)},
        io:format("~p: ~p~n", [Ctx, R]),
        R#{params => P}
    after
        hm_cluster:stop(C)
    end.

table(plain) -> scale_plain;
table(ec) -> scale_ec.

timed(F) ->
    T0 = erlang:monotonic_time(millisecond),
    R = F(),
    {erlang:monotonic_time(millisecond) - T0, R}.

mb(Bytes) -> Bytes div 1048576.

%% Each node's peak memory (MB) since the previous phase ended.
phase_peaks(C, Ids) -> [mb(hm_cluster:call(C, I, ?MODULE, sampler_phase, [])) || I <- Ids].

%% Writes per second of the writers on node 2 over `Ms' milliseconds.
rate(C, Ms) ->
    N0 = hm_cluster:call(C, 2, ?MODULE, writer_count, []),
    timer:sleep(Ms),
    N1 = hm_cluster:call(C, 2, ?MODULE, writer_count, []),
    (N1 - N0) * 1000 div Ms.

%% The ?AFTER_HEAL_S seconds after the heal: the writers' rate over all of them, and second
%% by second their writes and, for the EC table, per node at the second's start, its table
%% process's message queue and memory (MB), how many states it has caught up with, and the
%% operations it keeps waiting in its causal buffer (`busy' when the node did not answer
%% within 300 ms: the probes go in parallel and never stretch a second).
after_heal(C, Ctx, Tab, Ids) ->
    T0 = erlang:monotonic_time(millisecond),
    N0 = hm_cluster:call(C, 2, ?MODULE, writer_count, []),
    {NEnd, Rows} =
        lists:foldl(
          fun(S, {N, Acc}) ->
                  Self = self(),
                  Probes = [spawn(fun() ->
                                          Self ! {self(), try hm_cluster:call(
                                                                C, I, ?MODULE, table_probe,
                                                                [Ctx, Tab], 300)
                                                          catch _:_ -> busy
                                                          end}
                                  end) || I <- Ids],
                  timer:sleep(max(0, T0 + S * 1000 - erlang:monotonic_time(millisecond))),
                  N1 = hm_cluster:call(C, 2, ?MODULE, writer_count, []),
                  Got = [receive {P, R} -> R after 1000 -> busy end || P <- Probes],
                  {N1, Acc ++ [{N1 - N, Got}]}
          end, {N0, []}, lists:seq(1, ?AFTER_HEAL_S)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    {(NEnd - N0) * 1000 div Ms, Rows}.

%% What the EC table process of each node spent its time on so far: per node, its step totals
%% by kind (`{Steps, Microseconds, Reductions}') and its steps of ?LONG_STEP_MS or more
%% (`{Kind, AtMs, TookMs, Reductions}'), from `hypermnesia:info/1' (`none' for a plain table).
steps(_, plain, _, _) -> none;
steps(C, ec, Tab, Ids) ->
    [try hm_cluster:call(C, I, hypermnesia, info, [Tab]) of
         #{step_totals := Totals, slow_steps := Long} -> {Totals, Long};
         _ -> {#{}, []}
     catch _:_ -> {#{}, []}
     end || I <- Ids].

%% Per node, what its table process spent between two readings of steps/4: the kinds that took
%% the most time (`{Kind, Steps, Ms}', the longest first) and the long steps of that time.
steps_between(none, _) -> none;
steps_between(Before, After) ->
    [begin
         Spent = [{Kind, N - N0, (Us - Us0) div 1000}
                  || {Kind, {N, Us, _}} <- maps:to_list(T1),
                     {N0, Us0, _} <- [maps:get(Kind, T0, {0, 0, 0})], N > N0],
         {lists:reverse(lists:keysort(3, Spent)), Long1 -- Long0}
     end || {{T0, Long0}, {T1, Long1}} <- lists:zip(Before, After)].

%% @doc This node's EC table process: message queue, memory (MB), states caught up with,
%% operations waiting in the causal buffer (`none' for a plain table).
-spec table_probe(plain | ec, atom()) -> none | {integer(), integer(), integer(), integer()}.
table_probe(plain, _) -> none;
table_probe(ec, Tab) ->
    {Q, M} = case whereis(hm_ec_table_server:name(Tab)) of
                 undefined -> {-1, 0};
                 P -> [{message_queue_len, Q0}, {memory, M0}] =
                          process_info(P, [message_queue_len, memory]),
                      {Q0, M0}
             end,
    %% -1: the table's copy is not running here at that moment
    case hypermnesia:info(Tab) of
        #{state_catch_ups := S, buffered_ops := B} -> {Q, mb(M), S, B};
        _ -> {Q, mb(M), -1, -1}
    end.

%% A copy added on node 4, ready: the time `add_table_copy' took (Mnesia's load of the
%% table; an EC copy then still installs a member's state).
add_copy(C, plain, Tab, N4, I4, Rows) ->
    {LoadMs, {atomic, ok}} =
        timed(fun() -> hm_cluster:call(C, 1, mnesia, add_table_copy, [Tab, N4, ram_copies],
                                       infinity) end),
    ok = wait(fun() -> hm_cluster:call(C, I4, mnesia, table_info, [Tab, size]) >= Rows end),
    LoadMs;
add_copy(C, ec, Tab, N4, I4, Rows) ->
    {LoadMs, {atomic, ok}} =
        timed(fun() -> hm_cluster:call(C, 1, hypermnesia, add_table_copy,
                                       [Tab, N4, ram_copies], infinity) end),
    ok = wait(fun() ->
                 case hm_cluster:call(C, I4, hypermnesia, info, [Tab]) of
                     #{status := ready, size := S} -> S >= Rows;
                     _ -> false
                 end
         end),
    LoadMs.

wait(F) -> hm_cluster:wait_until(F, ?CONVERGE_TIMEOUT_MS).

%% From the heal: until every copy has delivered the same operations, holds none buffered,
%% and shows the same rows.
converge_ms(C, Tab, Ids, T0) ->
    Same = fun() ->
                   Infos = [hm_cluster:call(C, I, hypermnesia, info, [Tab]) || I <- Ids],
                   length(lists:usort([D || #{delivered := D} <- Infos])) =:= 1
                       andalso lists:all(fun(#{buffered_ops := B}) -> B =:= 0 end, Infos)
           end,
    ok = wait(Same),
    Ms = erlang:monotonic_time(millisecond) - T0,
    [_] = lists:usort([hm_cluster:call(C, I, ?MODULE, digest, [Tab], infinity) || I <- Ids]),
    Ms.

%%% ---------------------------------------------------------------- on the nodes

%% @doc Write keys 1..Rows, a thousand per activity.
-spec fill(plain | ec, atom(), pos_integer()) -> ok.
fill(Ctx, Tab, Rows) ->
    lists:foreach(fun(From) ->
                          To = min(Rows, From + 999),
                          activity(Ctx, fun() ->
                                                [mnesia:write({Tab, K, value(K)})
                                                 || K <- lists:seq(From, To)],
                                                ok
                                        end)
                  end, lists:seq(1, Rows, 1000)).

activity(plain, F) -> mnesia:activity(async_dirty, F);
activity(ec, F) -> hypermnesia:async_ec(F).

value(K) -> <<K:64, (binary:copy(<<"v">>, ?VALUE_BYTES - 8))/binary>>.

%% @doc Start `Writers' processes writing random keys of 1..Keys as fast as they can,
%% counting their writes in a shared counter.
-spec writer_start(plain | ec, atom(), #{writers := pos_integer(), keys := pos_integer()}) ->
          ok.
writer_start(Ctx, Tab, #{writers := W, keys := Keys}) ->
    Ref = counters:new(1, [write_concurrency]),
    persistent_term:put({?MODULE, count}, Ref),
    Pids = [spawn(fun() -> write_loop(Ctx, Tab, Keys, Ref) end) || _ <- lists:seq(1, W)],
    persistent_term:put({?MODULE, writers}, Pids),
    ok.

write_loop(Ctx, Tab, Keys, Ref) ->
    receive stop -> ok
    after 0 ->
            K = rand:uniform(Keys),
            ok = activity(Ctx, fun() -> mnesia:write({Tab, K, value(K)}) end),
            counters:add(Ref, 1, 1),
            write_loop(Ctx, Tab, Keys, Ref)
    end.

%% @doc How many writes the writers made so far.
-spec writer_count() -> non_neg_integer().
writer_count() -> counters:get(persistent_term:get({?MODULE, count}), 1).

%% @doc Stop the writers.
-spec writer_stop() -> ok.
writer_stop() ->
    [begin Ref = monitor(process, P), P ! stop,
           receive {'DOWN', Ref, process, P, _} -> ok end
     end || P <- persistent_term:get({?MODULE, writers})],
    ok.

%% @doc Sample this node's memory every ?SAMPLE_MS, keeping the peak.
-spec sampler_start() -> ok.
sampler_start() ->
    Pid = spawn(fun() -> sample(0) end),
    persistent_term:put({?MODULE, sampler}, Pid),
    ok.

sample(Peak) -> sample(Peak, 0).

sample(Peak, Phase) ->
    receive
        {peak, From} -> From ! {peak, Peak}, sample(Peak, Phase);
        {phase, From} ->
            Now = erlang:memory(total),
            From ! {peak, max(Phase, Now)},
            sample(max(Peak, Now), Now)
    after ?SAMPLE_MS ->
            Now = erlang:memory(total),
            sample(max(Peak, Now), max(Phase, Now))
    end.

%% @doc The highest memory sampled so far (bytes).
-spec sampler_peak() -> non_neg_integer().
sampler_peak() ->
    persistent_term:get({?MODULE, sampler}) ! {peak, self()},
    receive {peak, P} -> P after 5000 -> 0 end.

%% @doc The highest memory sampled since the previous call (bytes): a phase's peak.
-spec sampler_phase() -> non_neg_integer().
sampler_phase() ->
    persistent_term:get({?MODULE, sampler}) ! {phase, self()},
    receive {peak, P} -> P after 5000 -> 0 end.

%% @doc Where this node's memory is (MB): processes, ETS and binaries, and the process
%% holding the most (its registered name or initial call, and its message queue).
-spec memory_profile() -> map().
memory_profile() ->
    [{_, Top} | _] = lists:reverse(lists:keysort(1, [{M, P} || P <- processes(),
                                                           {memory, M} <- [process_info(P, memory)]])),
    Info = process_info(Top, [registered_name, initial_call, dictionary, memory,
                              message_queue_len]),
    Name = case proplists:get_value(registered_name, Info) of
               [] -> proplists:get_value('$initial_call',
                                         proplists:get_value(dictionary, Info, []),
                                         proplists:get_value(initial_call, Info));
               N -> N
           end,
    #{processes => mb(erlang:memory(processes)), ets => mb(erlang:memory(ets)),
      binary => mb(erlang:memory(binary)),
      top => {Name, mb(proplists:get_value(memory, Info)),
              proplists:get_value(message_queue_len, Info)}}.

%% @doc The rows of `Tab' this node's copy shows, summed up: how many and a hash of them.
-spec digest(atom()) -> {non_neg_integer(), integer()}.
digest(Tab) ->
    ets:foldl(fun(R, {N, H}) -> {N + 1, (H + erlang:phash2(R)) band 16#FFFFFFFFFFFF} end,
              {0, 0}, Tab).

%%% ---------------------------------------------------------------- report

report(#{rows := Rows, cut_s := CutS, writers := W}, Pl, Ec) ->
    Ratio = fun(K) -> ratio(maps:get(K, Ec), maps:get(K, Pl)) end,
    Peak = fun(R) -> lists:max(maps:get(peak_mb, R)) end,
    CutEnd = fun(R) -> lists:max(maps:get(cut_end_mb, R)) end,
    io_lib:format(
      "# Scale benchmark~n~n"
      "~b rows of ~b bytes, 3 ram_copies (a fourth added while writing), ~b writer(s) on "
      "node 2, node 3 cut off for ~b s; plain Mnesia (async_dirty) and an EC pawset table "
      "(async_ec), each on a cluster of its own, one after the other. "
      "`make bench-scale` (HM_SCALE_ROWS, HM_SCALE_CUT_S, HM_SCALE_WRITERS).~n~n"
      "| figure | plain | EC | EC / plain |~n|---|---|---|---|~n"
      "| fill, ms | ~b | ~b | ~s |~n"
      "| writer rate before the cut, writes/s | ~b | ~b | ~s |~n"
      "| added copy holds every row, ms | ~b | ~b | ~s |~n"
      "| writer rate during the cut, writes/s | ~b | ~b | ~s |~n"
      "| writer rate in the ~b s after the heal, writes/s | ~b | ~b | ~s |~n"
      "| peak node memory, MB (largest node) | ~b | ~b | ~s |~n"
      "| node memory at the end of the cut, MB (largest node) | ~b | ~b | ~s |~n"
      "| every copy equal, ms after the heal (writers on for ~b s of it) | - | ~p | |~n"
      "| every copy equal, ms after the writers stopped | - | ~p | |~n~n"
      "Memory per node (nodes 1, 2, 3, 4), peak: plain ~w, EC ~w; at the end of the cut: "
      "plain ~w, EC ~w.~n~n"
      "Peak memory by phase, MB per node (1, 2, 3, 4):~n~n"
      "| phase | plain | EC |~n|---|---|---|~n~s~n"
      "Where the memory is at the end of the cut (MB per node: processes, ETS, binaries, and "
      "the process holding most, with its message queue): plain ~s; EC ~s.~n~n"
      "The ~b s after the heal, second by second: the writes of the plain table's writers, "
      "and of the EC table's with, per node (1, 2, 3, 4) at the second's start, its table "
      "process's message queue and memory (MB), the states it caught up with so far and "
      "the operations waiting in its causal buffer (`busy': no answer within 300 ms):~n~n"
      "| s | plain writes | EC writes | EC nodes: queue, MB, states, waiting |~n"
      "|---|---|---|---|~n~s~n"
      "What each node's EC table process spent its time on, during the cut and in the ~b s "
      "after the heal: the kinds of step that took the most (ms in all, and how many steps), "
      "and the steps of ~b ms or more (the longest first):~n~n"
      "| node | during the cut | after the heal |~n|---|---|---|~n~s~n"
      "The added copy: `add_table_copy' returned after ~b ms (plain: ~b ms; Mnesia's load of "
      "the table), the copy was ready ~b ms later; meanwhile each node's EC table process "
      "spent its time on:~n~n| node | while the copy was added |~n|---|---|~n~s",
      [Rows, ?VALUE_BYTES, W, CutS,
       maps:get(fill_ms, Pl), maps:get(fill_ms, Ec), Ratio(fill_ms),
       maps:get(rate_before, Pl), maps:get(rate_before, Ec), Ratio(rate_before),
       maps:get(add_copy_ms, Pl), maps:get(add_copy_ms, Ec), Ratio(add_copy_ms),
       maps:get(rate_cut, Pl), maps:get(rate_cut, Ec), Ratio(rate_cut),
       ?AFTER_HEAL_S, maps:get(rate_heal, Pl), maps:get(rate_heal, Ec), Ratio(rate_heal),
       Peak(Pl), Peak(Ec), ratio(Peak(Ec), Peak(Pl)),
       CutEnd(Pl), CutEnd(Ec), ratio(CutEnd(Ec), CutEnd(Pl)),
       ?AFTER_HEAL_S, maps:get(converged_ms, Ec), maps:get(converged_after_stop_ms, Ec),
       maps:get(peak_mb, Pl), maps:get(peak_mb, Ec),
       maps:get(cut_end_mb, Pl), maps:get(cut_end_mb, Ec),
       phases(maps:get(phase_peak_mb, Pl), maps:get(phase_peak_mb, Ec)),
       profile(maps:get(cut_end_profile, Pl)), profile(maps:get(cut_end_profile, Ec)),
       ?AFTER_HEAL_S, timeline(maps:get(heal_timeline, Pl), maps:get(heal_timeline, Ec)),
       ?AFTER_HEAL_S, ?LONG_STEP_MS,
       spent(maps:get(steps_cut, Ec), maps:get(steps_heal, Ec)),
       maps:get(add_load_ms, Ec), maps:get(add_load_ms, Pl),
       maps:get(add_copy_ms, Ec) - maps:get(add_load_ms, Ec),
       spent(maps:get(steps_add, Ec))]).

spent(none) -> "";
spent(Add) when is_list(Add) ->
    [io_lib:format("| ~b | ~s |~n", [I, spent(A)])
     || {I, A} <- lists:zip(lists:seq(1, length(Add)), Add)];
spent({Kinds, Long}) ->
    Top = [io_lib:format("~s ~b ms (~b)", [K, Ms, N]) || {K, N, Ms} <- lists:sublist(Kinds, 4)],
    Longest = lists:sublist(lists:reverse(lists:keysort(3, Long)), 6),
    [lists:join(", ", Top),
     case Long of
         [] -> "";
         _ -> io_lib:format("; ~b long: ~s", [length(Long),
                                               lists:join(", ", [io_lib:format("~s ~b", [K, Ms])
                                                                 || {K, _, Ms, _} <- Longest])])
     end].

spent(none, _) -> "";
spent(Cut, Heal) ->
    [io_lib:format("| ~b | ~s | ~s |~n", [I, spent(C), spent(H)])
     || {I, C, H} <- lists:zip3(lists:seq(1, length(Cut)), Cut, Heal)].


timeline(Pl, Ec) ->
    [io_lib:format("| ~b | ~b | ~b | ~s |~n",
                   [S, P, E, lists:join(" / ", [probe(N) || N <- Nodes])])
     || {S, {P, _}, {E, Nodes}} <- lists:zip3(lists:seq(1, length(Ec)), Pl, Ec)].

phases(Pl, Ec) ->
    [io_lib:format("| ~s | ~w | ~w |~n", [phase_name(Ph), P, E])
     || {{Ph, P}, {Ph, E}} <- lists:zip(Pl, Ec)].

phase_name(fill) -> "fill";
phase_name(add_copy) -> "copy added (writer on)";
phase_name(cut) -> "the cut";
phase_name(heal) -> "heal, until every copy is equal".

probe({Q, M, St, W}) -> io_lib:format("~b, ~b, ~b, ~b", [Q, M, St, W]);
probe(busy) -> "busy".

profile(Nodes) ->
    lists:join(" / ",
               [io_lib:format("~b, ~b, ~b, ~0p ~b MB (queue ~b)",
                              [P, E, B, Name, M, Q])
                || #{processes := P, ets := E, binary := B, top := {Name, M, Q}} <- Nodes]).

ratio(_, 0) -> "-";
ratio(A, B) -> io_lib:format("~.2fx", [A / B]).
