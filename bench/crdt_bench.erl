%% @doc Microbenchmark of every CRDT type in every flavor through the {@link hm_crdt} facade;
%% writes a Markdown baseline (`make bench-crdt' -> bench/results/crdt.md).
%%
%% For each loadable type, each flavor (`state', `delta', `op') and each size N in
%% {@link sizes/0}, one replica A builds the object with N mutations ({@link hm_crdt:mutate/3},
%% timed) and a second replica B delivers A's events in order ({@link hm_crdt:deliver/2},
%% timed). Then the encoded size of A ({@link hm_crdt:to_binary/1}), its causal metadata
%% ({@link hm_crdt:metadata/1}) and, for the op flavor, both again after {@link hm_crdt:stable/2}
%% with A's delivered vector (quiescent: every event is delivered everywhere, so all is stable).
%% A type whose module is not loadable is listed as "not built".
%%
%% == Workloads (operation I = 1..N, replica round-robin over a, b, c on one object) ==
%% sets: `{add, I}' (N distinct elements); gcounter: increment; pncounter: increment when I is
%% odd, decrement when even; lwwreg, mvreg: `{assign, I}'; ewflag: enable when I is odd,
%% disable when even; map: `{update, I rem (N div 10), gcounter, increment}'. For types written
%% after this module the exact operation term is the first of a few candidate spellings that
%% the type's `is_op/1' accepts (see {@link ops/1}).
%%
%% == Windows and budgets ==
%% A state event is the whole state, so delivering all N of them costs O(N^2): B is first
%% brought to the state after N - W mutations by delivering that one event (one join, not
%% timed), then the last W events are timed ({@link state_window/0}). Every timed phase also
%% stops at a time budget ({@link budget_ms/0}); the report then says how many operations were
%% timed, and when the build stopped early, larger sizes of that type and flavor are skipped.
%% The timed build drops each event at once; the events B delivers come from a second,
%% untimed build, so keeping them never counts as mutate time. Cells whose first run is cheap
%% are repeated and the median is reported. Each run happens in a fresh process, so one run's
%% garbage never slows the next; the process also garbage-collects between phases, and a
%% warm-up run of every type and flavor comes first.
-module(crdt_bench).

-export([main/1, run_cell/3, sizes/0, ops/1, budget_ms/0, state_window/0]).

-define(REPLICAS, {a, b, c}).
%% Mutations or deliveries timed by one timer:tc call (the budget is checked between chunks).
-define(CHUNK, 1000).
%% State flavor: deliveries timed at the end of the event sequence.
-define(WINDOW, 200).
%% Repeat a cell (and report medians) when its first run took less than this.
-define(CHEAP_MS, 500).
-define(REPEATS, 5).
%% A cell that runs longer than this is killed (a safety net; budgets normally stop it).
-define(CELL_TIMEOUT_MS, 120000).

-type row() :: #{atom() => term()}.

%%% ---------------------------------------------------------------- parameters

%% @doc Object sizes (number of mutations).
-spec sizes() -> [pos_integer()].
sizes() -> [1000, 10000, 100000].

%% @doc Time budget of one timed phase (mutate or deliver) of one run.
-spec budget_ms() -> pos_integer().
budget_ms() -> 4000.

%% @doc How many trailing state events are delivered and timed in the state flavor.
-spec state_window() -> pos_integer().
state_window() -> ?WINDOW.

%% @doc The workload of a type: `{ok, fun((I, N) -> Op)}' or `{error, no_known_op}' when the
%% type's `is_op/1' accepts none of the candidate spellings.
-spec ops(hm_crdt:type()) -> {ok, fun((pos_integer(), pos_integer()) -> term())}
                              | {error, no_known_op}.
ops(Type) -> first_accepted(Type, candidates(Type)).

candidates(T) when T =:= awset; T =:= rwset ->
    [fun(I, _) -> {add, I} end];
candidates(gcounter) ->
    [fun(_, _) -> Inc end || Inc <- increments()];
candidates(pncounter) ->
    [fun(I, _) when I rem 2 =:= 1 -> Inc; (_, _) -> Dec end
     || {Inc, Dec} <- [{increment, decrement}, {{increment, 1}, {decrement, 1}},
                       {inc, dec}, {{inc, 1}, {dec, 1}}]];
candidates(T) when T =:= lwwreg; T =:= mvreg ->
    [fun(I, _) -> {Tag, I} end || Tag <- [assign, set, write]];
candidates(ewflag) ->
    [fun(I, _) when I rem 2 =:= 1 -> enable; (_, _) -> disable end];
candidates(map) ->
    [fun(I, N) -> {update, I rem max(1, N div 10), gcounter, Inc} end || Inc <- increments()];
candidates(_) -> [].

increments() -> [increment, {increment, 1}, inc, {inc, 1}].

%% A candidate is accepted when the type takes its first two operations (odd and even I).
first_accepted(_, []) -> {error, no_known_op};
first_accepted(Type, [F | Rest]) ->
    case lists:all(fun(I) -> accepts(Type, F(I, 1000)) end, [1, 2]) of
        true -> {ok, F};
        false -> first_accepted(Type, Rest)
    end.

accepts(Type, Op) ->
    try hm_crdt:is_op(Type, Op) catch _:_ -> false end.

%%% ---------------------------------------------------------------- main

%% @doc Run every cell, print progress, write the report to the given file.
-spec main([string()]) -> ok.
main([Out]) ->
    T0 = erlang:monotonic_time(millisecond),
    Load0 = loadavg(),
    {Built, NotBuilt} = lists:partition(fun is_built/1, hm_crdt:types()),
    {Known, NoOp} = lists:partition(fun(T) -> ops(T) =/= {error, no_known_op} end, Built),
    io:format("crdt_bench: built ~w, not built ~w, no known op ~w~n", [Built, NotBuilt, NoOp]),
    Cells = [{T, F} || T <- Known, F <- hm_crdt:flavors()],
    %% warm-up: load and run every code path once before anything is timed
    io:format("crdt_bench: warm-up~n"),
    _ = [isolated(T, F, 300) || {T, F} <- Cells],
    Total = length(Cells) * length(sizes()),
    {Rows, _} = lists:foldl(fun({T, F}, {Acc, K}) ->
                                    Rs = type_flavor(T, F, K, Total),
                                    {Acc ++ Rs, K + length(Rs)}
                            end, {[], 1}, Cells),
    NoOpRows = [#{type => T, flavor => '-', size => '-',
                  note => "no known op spelling (see crdt_bench:ops/1)"} || T <- NoOp],
    Secs = (erlang:monotonic_time(millisecond) - T0) / 1000,
    ok = filelib:ensure_dir(Out),
    Tmp = Out ++ ".tmp",
    Used = [begin {ok, Op} = ops(T), {T, Op(1, 1000), Op(2, 1000)} end || T <- Known],
    ok = file:write_file(Tmp, report(Rows ++ NoOpRows, NotBuilt, Used, Secs,
                                     {Load0, loadavg()})),
    ok = file:rename(Tmp, Out),
    io:format("crdt_bench: wrote ~s in ~.1f s~n", [Out, Secs]);
main(_) ->
    io:format("usage: crdt_bench:main([OutFile])~n"),
    erlang:error(badarg).

is_built(T) ->
    case code:ensure_loaded(hm_crdt:module(T)) of
        {module, _} -> true;
        _ -> false
    end.

%% Every size of one type and flavor; once a run hits a budget, larger sizes are skipped.
type_flavor(T, F, K0, Total) ->
    {Rows, _} =
        lists:foldl(
          fun(N, {Acc, Skip}) ->
                  Row = case Skip of
                            true -> #{type => T, flavor => F, size => N,
                                      note => "skipped: a smaller size's build hit the budget"};
                            false -> cell(T, F, N)
                        end,
                  progress(K0 + length(Acc), Total, Row),
                  {Acc ++ [Row], Skip orelse truncated(Row)}
          end, {[], false}, sizes()),
    Rows.

%% Only a truncated build skips larger sizes: a truncated delivery window still leaves the
%% larger sizes' mutate, bytes and metadata worth measuring.
truncated(#{mutated := M, size := N}) when M < N -> true;
truncated(_) -> false.

progress(K, Total, Row = #{type := T, flavor := F, size := N}) ->
    io:format("[~2w/~w] ~-9s ~-5s ~6w  ~s~n", [K, Total, T, F, N, summary(Row)]).

summary(#{us_mutate := Um, us_deliver := Ud, bytes := B, secs := S} = Row) ->
    io_lib:format("mutate ~s us, deliver ~s us, ~w bytes (~.1f s)~s",
                  [fmt(Um), fmt(Ud), B, S, [" " ++ N || N <- [maps:get(note, Row, "")],
                                                         N =/= ""]]);
summary(#{note := Note}) -> Note.

%%% ---------------------------------------------------------------- one cell

%% One type x flavor x size: run it in a fresh process, again while runs are cheap, and
%% report the medians of the timings.
cell(T, F, N) ->
    T0 = erlang:monotonic_time(millisecond),
    First = isolated(T, F, N),
    Runs = case First of
               #{ms := Ms} when Ms < ?CHEAP_MS ->
                   [First | [isolated(T, F, N) || _ <- lists:seq(2, ?REPEATS)]];
               _ -> [First]
           end,
    Secs = (erlang:monotonic_time(millisecond) - T0) / 1000,
    case [R || R = #{error := _} <- Runs] of
        [#{error := E} | _] ->
            #{type => T, flavor => F, size => N,
              note => lists:flatten(io_lib:format("error: ~0tp", [E]))};
        [] ->
            First#{type => T, flavor => F, size => N, runs => length(Runs), secs => Secs,
                   us_mutate => hm_bench_stats:lower_median([U || #{us_mutate := U} <- Runs]),
                   us_deliver => hm_bench_stats:lower_median([U || #{us_deliver := U} <- Runs])}
    end.


isolated(T, F, N) ->
    Self = self(),
    {Pid, Ref} = spawn_monitor(fun() -> Self ! {self(), run_cell(T, F, N)} end),
    receive
        {Pid, Result} ->
            erlang:demonitor(Ref, [flush]),
            Result;
        {'DOWN', Ref, process, Pid, Reason} ->
            #{error => Reason}
    after ?CELL_TIMEOUT_MS ->
            exit(Pid, kill),
            erlang:demonitor(Ref, [flush]),
            #{error => cell_timeout}
    end.

%% @doc One run of a cell, in the calling process: a map of measurements, or `#{error => _}'.
-spec run_cell(hm_crdt:type(), hm_crdt:flavor(), pos_integer()) -> row().
run_cell(T, F, N) ->
    try measure(T, F, N)
    catch C:E:St -> #{error => {C, E, hd(St ++ [none])}}
    end.

measure(T, F, N) ->
    T0 = erlang:monotonic_time(millisecond),
    {ok, OpFun} = ops(T),
    Budget = budget_ms() * 1000,
    erlang:garbage_collect(),
    %% 1. build A, timing every mutate; events are dropped at once so that keeping them never
    %% shows up as garbage-collection time in the mutate figure
    {A, Made, UsMut} = timed(fun(I, C) -> mutate(OpFun, N, I, C) end,
                             hm_crdt:new(T, F), N, Budget),
    Stats = final_stats(F, A),
    ValueA = erlang:phash2(hm_crdt:value(A)),
    erlang:garbage_collect(),
    %% 2. untimed: the same mutations again, keeping the events B will deliver
    {B0, Events} = receiver(T, F, events(T, F, OpFun, N, Made)),
    W = length(Events),
    erlang:garbage_collect(),
    %% 3. B delivers them in order, timed
    {{B, _}, Delivered, UsDel} = timed(fun(_, {Bx, [E | Es]}) -> {deliver_ok(E, Bx), Es} end,
                                       {B0, Events}, W, Budget),
    Converged = Delivered < W orelse erlang:phash2(hm_crdt:value(B)) =:= ValueA,
    Stats#{mutated => Made, window => W, delivered_n => Delivered,
           us_mutate => UsMut / max(1, Made), us_deliver => UsDel / max(1, Delivered),
           note => notes(N, Made, W, Delivered, Converged),
           ms => erlang:monotonic_time(millisecond) - T0}.

mutate(OpFun, N, I, C) ->
    {ok, C1, _Event} = hm_crdt:mutate(OpFun(I, N), replica(I), C),
    C1.

replica(I) -> element(1 + I rem 3, ?REPLICAS).

%% Bytes and metadata of A; for op also after stabilizing with A's delivered vector.
final_stats(op, A) ->
    S = hm_crdt:stable(hm_crdt:delivered(A), A),
    #{bytes => byte_size(hm_crdt:to_binary(A)), metadata => hm_crdt:metadata(A),
      bytes_stable => byte_size(hm_crdt:to_binary(S)), metadata_stable => hm_crdt:metadata(S)};
final_stats(_, A) ->
    #{bytes => byte_size(hm_crdt:to_binary(A)), metadata => hm_crdt:metadata(A)}.

%% Apply Step(I, Acc) for I = 1..N in chunks, each under one timer:tc, until N or until the
%% chunk that exhausts the budget. Chunks start at one step and at most double, never past
%% what the remaining budget allows at the rate seen so far (so a slow step, e.g. a full
%% state join, overshoots the budget by little), up to ?CHUNK.
%% Returns {Acc, steps done, microseconds}.
timed(Step, Acc, N, Budget) -> timed(Step, Acc, N, Budget, 1, 1, 0).

timed(_Step, Acc, N, _Budget, I, _Chunk, Us) when I > N -> {Acc, N, Us};
timed(_Step, Acc, _N, Budget, I, _Chunk, Us) when Us >= Budget -> {Acc, I - 1, Us};
timed(Step, Acc, N, Budget, I, Chunk, Us) ->
    Last = min(N, I + Chunk - 1),
    {Dt, Acc1} = timer:tc(fun() -> steps(Step, Acc, I, Last) end),
    Us1 = Us + Dt,
    PerStep = max(1, Us1 div Last),
    Next = max(1, lists:min([?CHUNK, 2 * Chunk, (Budget - Us1) div PerStep + 1])),
    timed(Step, Acc1, N, Budget, Last + 1, Next, Us1).

steps(_Step, Acc, I, Last) when I > Last -> Acc;
steps(Step, Acc, I, Last) -> steps(Step, Step(I, Acc), I + 1, Last).

%% The events of mutations 1..Made, in order. The state flavor keeps only what the receiver
%% uses: the event after Made - W mutations and the last W.
events(T, F, OpFun, N, Made) ->
    First = case F of
                state -> Made - min(state_window(), Made);
                _ -> 1
            end,
    {_, Evs} = lists:foldl(fun(I, {C, Acc}) ->
                                   {ok, C1, E} = hm_crdt:mutate(OpFun(I, N), replica(I), C),
                                   {C1, if I >= First -> [E | Acc]; true -> Acc end}
                           end, {hm_crdt:new(T, F), []}, lists:seq(1, Made)),
    lists:reverse(Evs).

%% The receiver, and the events it delivers under the timer. State: B first catches up with
%% one untimed join of the state after Made - W mutations.
receiver(T, state, Events) when length(Events) > ?WINDOW ->
    [Base | Window] = Events,
    {hm_crdt:deliver(Base, hm_crdt:new(T, state)), Window};
receiver(T, F, Events) ->
    {hm_crdt:new(T, F), Events}.

deliver_ok(E, B) ->
    case hm_crdt:deliver(E, B) of
        {error, _} = Err -> erlang:error(Err);
        B1 -> B1
    end.

notes(N, Made, Window, Delivered, Converged) ->
    string:join([X || X <- [if Made < N -> io_lib:format("built ~w of ~w (budget)",
                                                         [Made, N]);
                               true -> ""
                            end,
                            if Delivered < Window ->
                                    io_lib:format("delivered ~w of ~w (budget)",
                                                  [Delivered, Window]);
                               true -> ""
                            end,
                            if Converged -> "";
                               true -> "B's value differs from A's"
                            end],
                      X =/= ""], "; ").

%%% ---------------------------------------------------------------- report

report(Rows, NotBuilt, Used, Secs, {Load0, Load1}) ->
    {{Y, Mo, D}, {H, Mi, _}} = calendar:universal_time(),
    [<<"# CRDT microbenchmark\n\n">>,
     <<"Baseline of the `hm_crdt` facade: every type x flavor x size. ">>,
     <<"No target is asserted; compare later runs against this one.\n\n">>,
     <<"Command: `make bench-crdt` (module `bench/crdt_bench.erl`).\n\n">>,
     <<"## Machine\n\n">>,
     io_lib:format("- date (UTC): ~4..0w-~2..0w-~2..0w ~2..0w:~2..0w~n", [Y, Mo, D, H, Mi]),
     io_lib:format("- logical processors: ~w (schedulers online: ~w)~n",
                   [erlang:system_info(logical_processors),
                    erlang:system_info(schedulers_online)]),
     io_lib:format("- CPU: ~ts~n", [cpu_model()]),
     io_lib:format("- OTP ~s, ERTS ~s, ~s~n",
                   [erlang:system_info(otp_release), erlang:system_info(version),
                    erlang:system_info(system_architecture)]),
     io_lib:format("- load average (1, 5, 15 min) at start: ~s; at end: ~s~n", [Load0, Load1]),
     io_lib:format("- whole run: ~.1f s~n~n", [Secs]),
     <<"## Parameters\n\n">>,
     io_lib:format("- sizes: ~w; operation I = 1..size from replicas a, b, c round-robin, "
                   "all on one object (each mutation sees every earlier one)~n", [sizes()]),
     <<"- workloads: awset, rwset `{add, I}` (distinct elements); gcounter increment; "
       "pncounter increment (I odd) / decrement (I even); lwwreg, mvreg `{assign, I}`; "
       "ewflag enable (I odd) / disable (I even); map "
       "`{update, I rem (size div 10), gcounter, increment}`\n">>,
     io_lib:format("- operation terms used for I = 1, 2 (size 1000): ~s~n",
                   [lists:join("; ", [io_lib:format("~s `~0tp`, `~0tp`", [T, O1, O2])
                                      || {T, O1, O2} <- Used])]),
     io_lib:format("- state flavor: deliver timed on the last ~w events only "
                   "(B first joins the state after N - ~w mutations, untimed)~n",
                   [state_window(), state_window()]),
     io_lib:format("- time budget per timed phase and run: ~w ms (one timer:tc per chunk of calls; "
                   "chunks start at 1 call and grow to at most ~w)~n",
                   [budget_ms(), ?CHUNK]),
     io_lib:format("- runs whose first run took under ~w ms are repeated ~w times; "
                   "timings are medians~n~n", [?CHEAP_MS, ?REPEATS]),
     not_built(NotBuilt),
     <<"## Results\n\n">>,
     <<"| type | flavor | size | us/mutate | us/deliver | delivered (timed) | bytes "
       "| bytes after stable (op) | metadata | metadata after stable (op) | runs | notes |\n">>,
     <<"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n">>,
     [row(R) || R <- Rows],
     [row(#{type => T, flavor => '-', size => '-', note => "not built"}) || T <- NotBuilt],
     <<"\n## How to read this\n\n">>,
     how_to_read()].

not_built([]) -> [];
not_built(Ts) ->
    io_lib:format("Not built (module not loadable, not benchmarked): ~s.~n~n",
                  [string:join([atom_to_list(T) || T <- Ts], ", ")]).

row(R) ->
    Cols = [col(type, R), col(flavor, R), col(size, R),
            opt(us_mutate, R, fun fmt/1), opt(us_deliver, R, fun fmt/1),
            opt(delivered_n, R, fun(D) -> integer_to_list(D) ++ window_mark(R) end),
            col(bytes, R), col(bytes_stable, R), col(metadata, R), col(metadata_stable, R),
            col(runs, R), maps:get(note, R, "")],
    ["| ", lists:join(" | ", Cols), " |\n"].

window_mark(#{flavor := state, size := N, window := W}) when W < N -> " (last)";
window_mark(_) -> "".

col(K, R) -> opt(K, R, fun(V) when is_atom(V) -> atom_to_list(V);
                          (V) -> io_lib:format("~w", [V])
                       end).

opt(K, R, F) ->
    case R of
        #{K := V} -> F(V);
        _ -> ""
    end.

fmt(X) when X >= 100 -> integer_to_list(round(X));
fmt(X) when X >= 10 -> io_lib:format("~.1f", [X * 1.0]);
fmt(X) -> io_lib:format("~.2f", [X * 1.0]).

loadavg() ->
    case file:read_file("/proc/loadavg") of
        {ok, Bin} -> lists:join(" ", lists:sublist(string:lexemes(Bin, " \n"), 3));
        _ -> "unknown"
    end.

cpu_model() ->
    case file:read_file("/proc/cpuinfo") of
        {ok, Bin} ->
            case re:run(Bin, "^model name\\s*:\\s*(.*)$", [multiline, {capture, [1], binary}]) of
                {match, [M]} -> M;
                nomatch -> <<"unknown">>
            end;
        _ -> <<"unknown">>
    end.

how_to_read() ->
    <<"One replica A applies `size` mutations with `hm_crdt:mutate/3` (workloads above); a "
      "second replica B then delivers A's events in order with `hm_crdt:deliver/2`. "
      "**us/mutate** and **us/deliver** are wall-clock microseconds per call, averaged over "
      "the timed calls (the median over the runs when the cell was repeated; **runs** says "
      "how many). **delivered (timed)** is how many deliveries were timed: in the state "
      "flavor an event is the whole state and a delivery is a full join costing O(size), so "
      "B first catches up by one untimed join and only the last events are timed (\"(last)\"); "
      "in the delta and op flavors every event is delivered and timed. **bytes** is "
      "`byte_size(hm_crdt:to_binary(A))` of A's final state (delta and op include the causal "
      "delivery buffer). **metadata** is `hm_crdt:metadata/1` of A: for state and delta the "
      "live dots in the store plus the entries of the causal context, for op the timestamps "
      "in the PO-log. The two \"after stable\" columns are for the op flavor: A after "
      "`hm_crdt:stable/2` with its delivered vector, which is all stable because the run is "
      "quiescent (every event delivered everywhere), so metadata there should be 0. A note "
      "says when a timed phase stopped at the budget (the figures then cover the operations "
      "done; when the build stopped, larger sizes are skipped), or when B's value differed "
      "from A's after all deliveries (a bug). The machine is shared (see the load average): "
      "compare growth with size and ratios between flavors more than absolute values, and "
      "compare runs on the same machine only; differences under about 2x between two runs "
      "are within the noise seen while writing this benchmark.\n">>.
