%% @doc Deterministic simulator of EC tables (the Hypermnesia paper, §4.4–4.8, with the
%% durability of disc copies and partition tolerance): N copies of a table, each the
%% runtime's own per-table core ({@link hm_ec_table}, over {@link hm_tcsb} and
%% {@link hm_ec_key}) on a map store ({@link hm_ec_store_map}), in ONE Erlang process, a
%% seeded scheduler (`rand:seed_s', explicit state; simulated milliseconds, no wall clock)
%% and a faulty network. The simulator has no logic of its own for a table: what it runs is
%% what the runtime's server runs, message validation, membership checks and node down
%% included (every simulated write is `async': `sync_ec' waiters are not simulated).
%%
%% A schedule (seed S, see {@link gen/2}) is a configuration (replica count, `pawset' or
%% `prwset', conflict policy, ram / disc / mixed storage, network fault rates) and a trace of
%% timed actions: client operations (write, delete, delete_object over 3 keys and 3 values,
%% rarely clear), partitions (`halves', one node `isolated', `bridge': two sides joined only
%% through one node, non-transitive; `flap': a burst of alternating cuts and heals), heals,
%% crashes and restarts, and with option `membership' copies added (the last node joins
%% later, `hypermnesia:add_table_copy/3') and removed for good (`del_table_copy/2'): every
%% member takes the new member set at once; a new copy starts empty and catches up by state
%% transfer, and refuses writes until then. With option `load' (a family of its own, see
%% gen_load/2), thousands of operations in bursts, one node cut off, links of bounded
%% capacity that drop what a busy connection cannot take, and a small retransmission window;
%% with `faults' as well, that many more faults of every kind, crashes included. With option
%% `service', a receiver takes that many µs to apply each member operation, queued behind
%% everything else as in the runtime's table process ({@link slow_load/0}: the family with
%% both).
%% With option `silent', every partition of the schedule is silent, as a real netsplit is:
%% nothing tells the copies (no `nodedown'; the members cut off stay reachable to them),
%% what is sent across waits in the connection's buffers while they have room (the link's
%% `link_cap', or ?SILENT_BUFFER messages) and is dropped beyond, as `nosuspend' drops it
%% (a state waits for room), and what was on its way stops there. The heal lets the buffers
%% through, a tick later (TCP's retransmission timer, backed off during the cut), except on
%% about half the connections across the cut, chosen by the seed: each of those stays
%% silent for up to ?SILENT_LAG_MS more (the timer of each connection fires at its own
%% time), though not past the moment the tick time would have noticed it, while the others
%% carry traffic (action `{heal, [{A, B, Ms}]}'). A silent cut still there
%% ?SILENT_NOTICED_MS later is noticed (the distribution's tick time): it becomes a cut as
%% above, and what waited in the buffers is lost with the connection.
%% For benchmarks ({@link run/2} only): `drop_replicate' loses that share of operations'
%% first transmissions (retransmission repairs them), and `probe' folds every step of every
%% copy into an accumulator of the caller's (a measurement hook: it only looks).
%% The network drops, duplicates and delays (hence reorders) every
%% message with the configured probabilities; a cut drops everything across it. Every
%% replica ticks every 250 ms of simulated time (acks, retransmission with resend_due/2,
%% stabilization, gc). After the work phase: heal, restart every crashed replica, turn the
%% random faults off, run until quiescent (or a time cap), then check. With option `crdt'
%% the copies are CRDT tables (every type in every flavor, a broadcast epoch, client updates,
%% churn): the same table path, with the schedules and checkers of
%% {@link hm_sim_crdt_table}. The CRDT workloads
%% (every hm_crdt type in every flavor) run on the same scheduler, network, faults,
%% checkers 3-4 and minimiser ({@link hm_sim_engine}) as a driver module:
%% {@link hm_sim_crdt}; so do the replica groups under DottedDB replication:
%% {@link hm_sim_dotted}, and partitioned tables: {@link hm_sim_frag}. The table copies'
%% driver is {@link hm_sim_ec}, checkers 1, 2 and 5 {@link hm_sim_ec_check}; this module
%% makes the schedules, runs them and is the command line of every family.
%%
%% Checkers:
%% <ol>
%% <li>convergence: every replica's rows (what reads show) are equal, and so their hash;</li>
%% <li>no lost acknowledged write. An operation is ACKNOWLEDGED when it was applied at its
%% origin (async_ec returns then) and, from then on, at every moment at least one replica
%% that has delivered it keeps it: a replica that is up, or a crashed disc replica whose
%% durable broadcast state (hm_log `state') counts it. A crash of a ram replica (or of a disc
%% replica with no such state: it restarts by snapshot) removes it from the holders, and so
%% does a crash of a disc replica that kept only a part of its log written since its last
%% sync (Mnesia's log is written asynchronously: a crash keeps the state after any prefix of
%% the writes); when the holders become empty the operation is lost with the crash, which
%% async_ec permits. An
%% acknowledged operation must be delivered everywhere at the end; an acknowledged write
%% `W' of record R on key K must be visible (siblings: R is shown; term_order / lww: K is
%% present) unless an operation delivered at the end supersedes it: on K (or a clear) and
%% causally after W (a write, delete, delete_object of R, clear), or, for `prwset' only,
%% concurrent with W and a delete, clear or delete_object of R;</li>
%% <li>causal delivery: every application at a replica is checked, against a delivered
%% vector the simulator keeps itself, to be the next operation of its origin and to follow
%% everything its timestamp has seen (a snapshot install sets the vector);</li>
%% <li>stability safety: at every stabilization step, every dot whose timestamp is dropped
%% (a key folded, a logged operation gc'd, a prwset clear forgotten) must be delivered by
%% every member that is up and ready, and by every crashed disc member with a durable
%% state; a member that is syncing (or a crashed ram member) is excluded: it takes a
%% snapshot from a ready member;</li>
%% <li>metadata bound: at quiescence no key holds a timestamp (hm_ec_key:timestamps/1:
%% stabilization folded every key, including those it only reaches through the operations
%% that became stable), the broadcast log and the causal buffer are empty.</li>
%% </ol>
%% Failures come with the seed; {@link minimise/3} drops trace actions while the failure
%% persists; the minimised trace replays with `make sim SEED=S TRACE=File'.
-module(hm_sim).

-export([main/1, gen/2, run/2, run_seed/2, minimise/3, check_seeds/2, slow_load/0]).
%% the helpers of every family's schedules
-export([nodes_of/1, draws/2, pick/2, gen_faults/4, gen_ops/6]).
-export_type([cfg/0, action/0, result/0]).

-import(hm_sim_engine, [silent_action/3, minimise_with/3, print_minimised/8, totals/2,
                        fault_line/1]).

%% the load family's flow-control limit (hm_ec_table option `flow'), small enough that its
%% bursts reach it
-define(LOAD_FLOW, 32).
%% the load family's lag for catching up by state (odd seeds), well below its backlogs
-define(LOAD_CATCH_UP, 100).
-define(KEYS, [k1, k2, k3]).
-define(VALUES, [a, b, c]).

-type cfg() :: #{n := pos_integer(), type := hm_ec_key:ec_type(),
                 policy := hm_ec_key:policy(), storage := ram | disc | mixed,
                 drop := float(), dup := float(), delay := pos_integer(),
                 duration := pos_integer(), seed := integer(), skew := #{node() => integer()},
                 keys => [term()], drop_replicate => float(), flow => pos_integer() | infinity,
                 catch_up => pos_integer() | infinity, log_limit => pos_integer() | infinity,
                 part_keys => pos_integer() | infinity, parts_late => boolean(),
                 fold_keys => pos_integer() | infinity,
                 probe => {fun((non_neg_integer(), node(), [hm_ec_table:effect()],
                                hm_ec_table:state(), term()) -> term()), term()}}.
-type action() :: hm_sim_engine:action().
-type result() :: hm_sim_engine:result().

%%% ================================================================ schedules

%% @doc The configuration and trace of seed `Seed'. Options override configuration fields
%% (`n', `type', `policy', `storage', `drop', `dup', `delay', `duration', `ops', `faults').
-spec gen(integer(), map()) -> {cfg(), [action()]}.
gen(Seed, Opts = #{silent := true}) ->
    %% the same schedule, every partition silent, and connections that stay silent after
    %% the heal
    {Cfg = #{n := N}, Trace} = gen(Seed, maps:remove(silent, Opts)),
    R0 = rand:seed_s(exsss, {Seed, 16#51e, 16#1a9}),
    {Silent, _, _} = lists:foldl(fun(A, Acc) -> silent_action(A, nodes_of(N), Acc) end,
                                 {[], none, R0}, Trace),
    {Cfg, lists:reverse(Silent)};
gen(Seed, Opts = #{load := true}) ->
    gen_load(Seed, maps:remove(load, Opts));
gen(Seed, Opts = #{crdt := true}) ->
    hm_sim_crdt_table:gen(Seed, maps:remove(crdt, Opts));
gen(Seed, Opts) ->
    R0 = rand:seed_s(exsss, {Seed, 16#5eed, 16#51e}),
    {[N, TI, PI, SI, Drop, Dup, Delay, NOps, NFaults], R1} =
        draws([{int, 3, 7}, {int, 1, 2}, {int, 1, 3}, {int, 1, 3}, {int, 0, 15},
               {int, 0, 10}, {int, 1, 150}, {int, 15, 60}, {int, 0, 4}], R0),
    Cfg0 = #{n => N, type => element(TI, {pawset, prwset}),
             policy => element(PI, {term_order, lww, siblings}),
             storage => element(SI, {ram, disc, mixed}),
             drop => Drop / 100, dup => Dup / 100, delay => Delay, duration => 4000,
             seed => Seed, ops => NOps, faults => NFaults, keys => ?KEYS},
    Cfg1 = with_catch_up(Seed, 3, maps:merge(Cfg0#{fold_keys => fold_keys(Seed)}, Opts)),
    #{n := N1, duration := Dur, ops := Ops, faults := Fs} = Cfg1,
    Nodes = nodes_of(N1),
    {Skews, R2} = lists:foldl(fun(Nd, {M, R}) ->
                                      {X, R_} = rand:uniform_s(20001, R),
                                      {M#{Nd => (X - 10001) * 10}, R_}
                              end, {#{}, R1}, Nodes),
    Cfg = maps:without([ops, faults], Cfg1#{skew => Skews}),
    Keys = maps:get(keys, Cfg),
    {OpActs0, R3} = gen_ops(Ops, Nodes, Dur, Keys, R2),
    OpActs = case maps:get(clear, Cfg, true) of
                 true -> OpActs0;
                 false -> [{T, {op, Nd, K, {write, a}}} || {T, {op, Nd, K, clear}} <- OpActs0]
                          ++ [A || A = {_, {op, _, _, Op}} <- OpActs0, Op =/= clear]
             end,
    {FaultActs0, _} = gen_faults(Fs, Nodes, Dur, R3),
    FaultActs = case maps:get(crash, Cfg, true) of
                    true -> FaultActs0;
                    false -> [A || A = {_, F} <- FaultActs0, element(1, F) =/= crash,
                                   element(1, F) =/= restart]
                end,
    MemberActs = case maps:get(membership, Cfg, false) of
                     true -> gen_membership(Seed, Nodes, Dur);
                     false -> []
                 end,
    MnesiaActs = case maps:get(mnesia, Cfg, true) of
                     true -> gen_mnesia_restarts(Seed, Nodes, Dur);
                     false -> []
                 end,
    {maps:without([membership, mnesia], Cfg),
     lists:keysort(1, OpActs ++ FaultActs ++ MemberActs ++ MnesiaActs)}.

%% Stabilization in steps (hm_ec_table option `fold_keys'): even seeds fold one key per
%% step, so that a stable vector's keys are folded over several steps.
fold_keys(Seed) when Seed rem 2 =:= 0 -> 1;
fold_keys(_) -> infinity.

%% Catching up by state (hm_ec_table option `catch_up'): the copies of odd seeds with every
%% copy in ram take a member's state once `Lag' operations behind it (the table's few keys
%% are always fewer), as the runtime's copies of a table without a copy on disc do; the
%% others only catch up by operations. One seed in four of those sends its states in parts
%% of `Lag' div 20 keys at most (option `part_keys'), so that a state of the table's few keys
%% goes in several (hm_ec_table_stream), each part read as it goes, except in one of those
%% seeds in two, which read every part at once (option `parts_late', as while a cluster
%% speaks the previous wire version, and snapshots go whole). One even seed in two, of any
%% storage, catches up by operations only but sends its snapshots in parts of that many keys
%% (from its `ram_copies' copies: a disc copy sends its snapshot whole). An option
%% `catch_up' given is kept.
with_catch_up(_, _, Cfg = #{catch_up := _}) -> Cfg;
with_catch_up(Seed, Lag, Cfg = #{storage := ram}) when Seed rem 4 =:= 1 ->
    maps:merge(#{part_keys => max(1, Lag div 20), parts_late => Seed rem 8 =:= 1},
               Cfg#{catch_up => Lag});
with_catch_up(Seed, Lag, Cfg = #{storage := ram}) when Seed rem 2 =:= 1 -> Cfg#{catch_up => Lag};
with_catch_up(Seed, Lag, Cfg) when Seed rem 4 =:= 2 ->
    maps:merge(#{part_keys => max(1, Lag div 20)}, Cfg#{catch_up => infinity});
with_catch_up(_, _, Cfg) -> Cfg#{catch_up => infinity}.

%% Mnesia alone stopping and starting again on a node while hypermnesia runs (as Mnesia's
%% own tests do with mnesia:lkill/0): none, one or two, from a random stream of their own.
gen_mnesia_restarts(Seed, Nodes, Dur) ->
    R0 = rand:seed_s(exsss, {Seed, 16#3e51, 16#a}),
    {[K], R1} = draws([{int, -1, 2}], R0),
    {Acts, _} = lists:foldl(fun(_, {Acc, R}) ->
                                    {[T, Len], Ra} = draws([{int, 1, Dur}, {int, 1, Dur div 4}], R),
                                    {X, Rb} = pick(Nodes, Ra),
                                    {Acc ++ [{T, {mnesia_stop, X}}, {T + Len, {mnesia_start, X}}],
                                     Rb}
                            end, {[], R1}, lists:seq(1, max(0, K))),
    Acts.

%% Full load (option `load'): thousands of client operations, most of them in bursts, on a
%% few dozen keys of 3 to 5 replicas, one node cut off for 1 to 2.5 s in the middle, and a
%% network that behaves like Erlang distribution under load: each link carries at most
%% `link_cap' messages at a time and drops what is sent beyond (a busy distribution port and
%% `nosuspend'), and retransmission sends at most `window' operations per member and round.
%% The partition leaves each side hundreds to thousands of operations behind the other:
%% backlogs many times the retransmission window, to be caught up while every link is
%% saturated.
gen_load(Seed, Opts) ->
    R0 = rand:seed_s(exsss, {Seed, 16#10ad, 16#b057}),
    {[N, TI, PI, SI, Delay, NOps, NKeys, Cap, Win, Cut, CutLen, Victim], R1} =
        draws([{int, 3, 5}, {int, 1, 2}, {int, 1, 3}, {int, 1, 3}, {int, 1, 30},
               {int, 1500, 3000}, {int, 10, 60}, {int, 15, 60}, {int, 4, 32},
               {int, 500, 1200}, {int, 1000, 2500}, {int, 1, 5}], R0),
    Keys = [list_to_atom("k" ++ integer_to_list(I)) || I <- lists:seq(1, NKeys)],
    Cfg0 = #{n => N, type => element(TI, {pawset, prwset}),
             policy => element(PI, {term_order, lww, siblings}),
             storage => element(SI, {ram, disc, mixed}),
             drop => 0.0, dup => 0.0, delay => Delay, duration => 4000, seed => Seed,
             keys => Keys, link_cap => Cap, window => Win, flow => ?LOAD_FLOW},
    Cfg1 = with_catch_up(Seed, ?LOAD_CATCH_UP, maps:merge(Cfg0, maps:remove(faults, Opts))),
    #{n := N1, duration := Dur} = Cfg1,
    Nodes = nodes_of(N1),
    Cfg = Cfg1#{skew => maps:from_list([{Nd, 0} || Nd <- Nodes])},
    %% option `faults': that many more faults of every kind (crashes and restarts too), from
    %% a random stream of their own (the seed's other actions stay the same)
    {Extra, _} = gen_faults(maps:get(faults, Opts, 0), Nodes, Dur,
                            rand:seed_s(exsss, {Seed, 16#fa, 16#17})),
    %% four bursts of 150 ms take two thirds of the operations
    {Bursts, R2} = draws([{int, 0, Dur - 150} || _ <- lists:seq(1, 4)], R1),
    {Ops, R3} = gen_ops(NOps, Nodes, Dur, Keys, R2),
    {Timed, _} = lists:mapfoldl(fun({T, A}, R) ->
                                        {U, Ra} = rand:uniform_s(3, R),
                                        case U of
                                            3 -> {{T, A}, Ra};
                                            _ -> {B, Rb} = pick(Bursts, Ra),
                                                 {{B + T rem 150, A}, Rb}
                                        end
                                end, R3, Ops),
    X = lists:nth(1 + (Victim - 1) rem N1, Nodes),
    Fault = [{Cut, {partition, isolated, [[X], Nodes -- [X]]}}, {Cut + CutLen, heal}],
    {Cfg, lists:keysort(1, Timed ++ Fault ++ Extra)}.

%% Copies added and removed (hypermnesia:add_table_copy/3, del_table_copy/2), drawn from a
%% random stream of their own so that a seed's other actions stay those of the same seed
%% without them: the last node joins later (it starts without a copy) and/or another one's
%% copy is removed for good, at random times.
gen_membership(Seed, Nodes, Dur) ->
    R0 = rand:seed_s(exsss, {Seed, 16#3e3b, 16#e5}),
    {[Join, Leave, TJ, TL, LI], _} =
        draws([{int, 0, 1}, {int, 0, 1}, {int, 1, Dur}, {int, 1, Dur},
               {int, 1, length(Nodes) - 1}], R0),
    Joiner = lists:last(Nodes),
    [{TJ, {add, Joiner}} || Join =:= 1]
        ++ [{TL, {remove, lists:nth(LI, Nodes -- [Joiner])}} || Leave =:= 1].

%% @doc The options of the full-load family with crashes and slow receivers: the load
%% family's schedules with 8 more faults of every kind, disc copies (a crash keeps the copy's
%% state; it restarts behind the others), and receivers that take 1 ms per member operation
%% (`service'). A copy that restarted catches up from members that may be catching up too:
%% the schedules where a copy took seconds to catch up a few operations a tick.
-spec slow_load() -> map().
slow_load() -> #{load => true, faults => 8, storage => disc, service => 1000}.

gen_ops(K, Nodes, Dur, Keys, R) -> gen_ops(K, Nodes, Dur, Keys, {100, 55, 75, 97}, R).

%% @doc `K' client operations over `Keys' at random times of the first `Dur' ms, on random
%% nodes of `Nodes': of every `Of' drawn, up to `W' are writes, up to `D' deletes, up to
%% `DO' delete_objects (of 3 values), the rest clears.
-spec gen_ops(non_neg_integer(), [node()], pos_integer(), [term()],
              {pos_integer(), non_neg_integer(), non_neg_integer(), non_neg_integer()},
              rand:state()) -> {[action()], rand:state()}.
gen_ops(0, _, _, _, _, R) -> {[], R};
gen_ops(K, Nodes, Dur, Keys, Mix = {Of, W, D, DO}, R) ->
    {T, R1} = rand:uniform_s(Dur, R),
    {Nd, R2} = pick(Nodes, R1),
    {Key, R3} = pick(Keys, R2),
    {V, R4} = pick(?VALUES, R3),
    {X, R5} = rand:uniform_s(Of, R4),
    Op = if X =< W -> {write, V};
            X =< D -> delete;
            X =< DO -> {delete_object, V};
            true -> clear
         end,
    {Rest, R6} = gen_ops(K - 1, Nodes, Dur, Keys, Mix, R5),
    {[{T, {op, Nd, Key, Op}} | Rest], R6}.

%%% ================================================================ faults and helpers of every family's schedules

%% @doc Draw integers `{int, Lo, Hi}' in order from the random state.
-spec draws([{int, integer(), integer()}], rand:state()) -> {[integer()], rand:state()}.
draws(Specs, R) ->
    lists:foldl(fun({int, Lo, Hi}, {Acc, Ra}) ->
                        {X, Ra1} = rand:uniform_s(Hi - Lo + 1, Ra),
                        {Acc ++ [Lo + X - 1], Ra1}
                end, {[], R}, Specs).

%% @doc A uniformly random element of a non-empty list.
-spec pick([T, ...], rand:state()) -> {T, rand:state()}.
pick(L, R) -> {I, R1} = rand:uniform_s(length(L), R), {lists:nth(I, L), R1}.

%% @doc `K' random faults (partitions of the four shapes, each with its heal; crashes, each
%% with its restart) over `Nodes' during the first `Dur' simulated ms.
-spec gen_faults(non_neg_integer(), [node()], pos_integer(), rand:state()) ->
          {[action()], rand:state()}.
gen_faults(0, _, _, R) -> {[], R};
gen_faults(K, Nodes, Dur, R) ->
    {Kind, R1} = pick([halves, isolated, bridge, flap, crash, crash], R),
    {T, R2} = rand:uniform_s(Dur, R1),
    {Len, R3} = rand:uniform_s(Dur, R2),
    {Acts, R4} = fault(Kind, T, Len, Nodes, R3),
    {Rest, R5} = gen_faults(K - 1, Nodes, Dur, R4),
    {Acts ++ Rest, R5}.

fault(halves, T, Len, Nodes, R) ->
    {Sh, R1} = shuffle(Nodes, R),
    {A, B} = lists:split(length(Nodes) div 2, Sh),
    {[{T, {partition, halves, [A, B]}}, {T + Len, heal}], R1};
fault(isolated, T, Len, Nodes, R) ->
    {X, R1} = pick(Nodes, R),
    {[{T, {partition, isolated, [[X], Nodes -- [X]]}}, {T + Len, heal}], R1};
fault(bridge, T, Len, Nodes, R) ->
    {Sh, R1} = shuffle(Nodes, R),
    [Br | Others] = Sh,
    {A, B} = lists:split(length(Others) div 2, Others),
    {[{T, {partition, bridge, [[Br | A], [Br | B]]}}, {T + Len, heal}], R1};
fault(flap, T, _Len, Nodes, R) ->
    {Sh, R1} = shuffle(Nodes, R),
    {A, B} = lists:split(length(Nodes) div 2, Sh),
    {Acts, R2} = lists:foldl(fun(I, {Acc, Ra}) ->
                                     {D, Ra1} = rand:uniform_s(300, Ra),
                                     At = T + I * 200 + D,
                                     Act = case I rem 2 of
                                               0 -> {partition, flap, [A, B]};
                                               1 -> heal
                                           end,
                                     {[{At, Act} | Acc], Ra1}
                             end, {[], R1}, lists:seq(0, 5)),
    {lists:reverse(Acts), R2};
fault(crash, T, Len, Nodes, R) ->
    {X, R1} = pick(Nodes, R),
    {[{T, {crash, X}}, {T + Len div 2, {restart, X}}], R1}.

shuffle(L, R) ->
    {Tagged, R1} = lists:foldl(fun(X, {Acc, Ra}) ->
                                       {U, Ra1} = rand:uniform_s(Ra),
                                       {[{U, X} | Acc], Ra1}
                               end, {[], R}, L),
    {[X || {_, X} <- lists:sort(Tagged)], R1}.

%% @doc The node names `n1' .. `nN'.
-spec nodes_of(pos_integer()) -> [node()].
nodes_of(N) -> [list_to_atom("n" ++ integer_to_list(I)) || I <- lists:seq(1, N)].

%%% ================================================================ running

%% @doc Generate and run seed `Seed'.
-spec run_seed(integer(), map()) -> result().
run_seed(Seed, Opts) ->
    {Cfg, Trace} = gen(Seed, Opts),
    run(Cfg, Trace).

%% @doc Run a configuration and trace to quiescence, then check.
-spec run(cfg(), [action()]) -> result().
run(Cfg = #{n := N, seed := Seed}, Trace) ->
    Universe = nodes_of(N),
    %% `nodes' are the members (copy holders) now; a node that joins later starts without
    Nodes = Universe -- [Nd || {_, {add, Nd}} <- Trace],
    S0 = #{driver => hm_sim_ec, now => 0, seq => 0, q => gb_trees:empty(), cfg => Cfg,
           nodes => Nodes,
           universe => Universe,
           rand => rand:seed_s(exsss, {Seed, 16#e7, 16#ab}), reps => #{}, inc => #{},
           groups => all, epochs => #{}, applied => #{}, ops => #{}, failures => [],
           faults => true,
           stats => #{}, samples => []},
    Finish = case Cfg of
                 #{crdt := _} -> fun hm_sim_crdt_table:finish/1;
                 _ -> fun hm_sim_ec_check:finish/1
             end,
    try lists:foldl(fun(Nd, Acc) -> hm_sim_ec:start_node(Nd, Acc) end,
                    S0#{reps := maps:from_list([{Nd, out} || Nd <- Universe])}, Nodes) of
        %% every node of the universe ticks, those that join later too
        S1 -> hm_sim_engine:drive(S1, Universe, Trace, Finish)
    catch Class:Reason:Stack ->
            #{ok => false, failures => [{exception, Class, Reason, lists:sublist(Stack, 6)}],
              stats => #{}}
    end.

%%% ================================================================ minimisation

%% @doc Drop trace actions one at a time (a fault with its heal or restart), keeping a drop when the run still
%% fails; at most `Budget' runs.
-spec minimise(cfg(), [action()], pos_integer()) -> [action()].
minimise(Cfg, Trace, Budget) -> minimise_with(fun(T) -> run(Cfg, T) end, Trace, Budget).

%%% ================================================================ seeds, CLI, report

%% @doc Run seeds `From' .. `From + Count - 1'; returns {Passed, Failed, Totals, FailedSeeds}.
-spec check_seeds({integer(), pos_integer()}, map()) ->
          {non_neg_integer(), non_neg_integer(), map(), [{integer(), result()}]}.
check_seeds({From, Count}, Opts) ->
    lists:foldl(fun(Seed, {P, F, Tot, Bad}) ->
                        Res = #{ok := Ok, stats := St} = run_seed(Seed, Opts),
                        Tot1 = totals(St, Tot),
                        case Ok of
                            true -> {P + 1, F, Tot1, Bad};
                            false -> {P, F + 1, Tot1, Bad ++ [{Seed, Res}]}
                        end
                end, {0, 0, #{}, []}, lists:seq(From, From + Count - 1)).

%% One family of hm_sim_frag's schedules: run seeds 1..Count, print failures, totals and the
%% pass line; `What' describes the schedules and ends with the format of the op count.
frag_family(Count, Opts, Kind, Line, What) ->
    {P, F, Tot, Bad} = hm_sim_frag:check_seeds({1, Count}, Opts),
    [io:format("FAILED ~s seed ~p: ~p~n", [Kind, Seed, maps:get(failures, Res)])
     || {Seed, Res} <- Bad],
    io:format("~p ~s schedules " ++ What ++ ", ~p passed on, ~p hints, ~p copies moved away, "
              "~p messages; session order: ~p pairs checked, ~p writes refused by a holder "
              "behind; ~p crashes (~p of a node holding hints), ~p hints and ~p acknowledged "
              "writes lost with a crash; ~p nodes dead for good, ~p of them removed from the "
              "pool while down, with ~p copies~n",
              [P + F, Kind, maps:get(ops, Tot, 0), maps:get(passed_on, Tot, 0),
               maps:get(hints_kept, Tot, 0), maps:get(copies_removed, Tot, 0),
               maps:get(msgs, Tot, 0), maps:get(session_pairs, Tot, 0),
               maps:get(refused_behind, Tot, 0), maps:get(crashes, Tot, 0),
               maps:get(crashes_holding_hints, Tot, 0), maps:get(hints_lost_with_crash, Tot, 0),
               maps:get(writes_lost_with_crash, Tot, 0), maps:get(dead_nodes, Tot, 0),
               maps:get(dead_nodes_removed, Tot, 0),
               maps:get(copies_of_dead_nodes_removed, Tot, 0)]),
    io:format("~s: ~p passed, ~p failed~n", [Line, P, F]),
    {P, F}.

%% @doc Command line: `["seeds", N]' (table seeds 1..N, the same with copies added and
%% removed, then CRDT seeds 1..N of {@link hm_sim_crdt}, then CRDT-table seeds 1..N of
%% {@link hm_sim_crdt_table}, then DottedDB group seeds 1..N of
%% {@link hm_sim_dotted}), `["seed", S]' (the schedules
%% of seed S), `["seed", S, TraceFile]'
%% (a minimised trace of either kind), `["report", File]'. Halts with status 1 when a schedule
%% failed.
-spec main([string()]) -> no_return().
main(["seeds", N]) ->
    Count = list_to_integer(N),
    {P, F, Tot, Bad} = check_seeds({1, Count}, #{}),
    [print_failure(Seed, Res) || {Seed, Res} <- Bad],
    io:format("~p table schedules, ~p client ops, ~p messages, ~p catch-ups by state; faults "
              "injected: ~s~n",
              [P + F, maps:get(ops, Tot, 0), maps:get(msgs, Tot, 0), maps:get(merges, Tot, 0),
               fault_line(Tot)]),
    io:format("sim tables: ~p passed, ~p failed~n", [P, F]),
    {MP, MF, MTot, MBad} = check_seeds({1, Count}, #{membership => true}),
    [print_failure(Seed, #{membership => true}, Res) || {Seed, Res} <- MBad],
    io:format("~p table schedules with copies added and removed (~p adds, ~p removes, ~p "
              "writes refused on a copy still syncing), ~p client ops, ~p messages, ~p "
              "catch-ups by state~n",
              [MP + MF, maps:get(adds, MTot, 0), maps:get(removes, MTot, 0),
               maps:get(ops_refused, MTot, 0), maps:get(ops, MTot, 0), maps:get(msgs, MTot, 0),
               maps:get(merges, MTot, 0)]),
    io:format("sim membership: ~p passed, ~p failed~n", [MP, MF]),
    {LP, LF, LTot, LBad} = check_seeds({1, Count}, #{load => true}),
    [print_failure(Seed, #{load => true}, Res) || {Seed, Res} <- LBad],
    io:format("~p table schedules under full load (~p client ops, ~p messages, ~p dropped by "
              "a busy link, ~p lost in a cut, ~p operations received again after they were "
              "applied, ~p writes put off while a member lagged, ~p catch-ups by state; "
              "converged ~s after the work phase)~n",
              [LP + LF, maps:get(ops, LTot, 0), maps:get(msgs, LTot, 0),
               maps:get(dropped_busy, LTot, 0), maps:get(dropped_cut, LTot, 0),
               maps:get(duplicates, LTot, 0), maps:get(ops_held, LTot, 0),
               maps:get(merges, LTot, 0),
               converge_line(LTot, LP + LF)]),
    io:format("sim load: ~p passed, ~p failed~n", [LP, LF]),
    Slow = slow_load(),
    {SP, SF, STot, SBad} = check_seeds({1, max(1, Count div 6)}, Slow),
    [print_failure(Seed, Slow, Res) || {Seed, Res} <- SBad],
    io:format("~p table schedules under full load with crashes, restarts and receivers that "
              "take 1 ms per member operation (~p client ops, ~p crashes, ~p operations received "
              "again after they were applied; quiescent ~.1f simulated s after the work phase on "
              "average, ~.1f s at most)~n",
              [SP + SF, maps:get(ops, STot, 0), maps:get(crashes, STot, 0),
               maps:get(duplicates, STot, 0),
               maps:get(quiesced_ms, STot, 0) / max(1, SP + SF) / 1000,
               maps:get(max_quiesced_ms, STot, 0) / 1000]),
    io:format("sim slow receivers: ~p passed, ~p failed~n", [SP, SF]),
    {QP, QF, QTot, QBad} = check_seeds({1, Count}, #{membership => true, silent => true}),
    [print_failure(Seed, #{membership => true, silent => true}, Res) || {Seed, Res} <- QBad],
    {WP, WF, WTot, WBad} = check_seeds({1, max(1, Count div 6)}, #{load => true, silent => true}),
    [print_failure(Seed, #{load => true, silent => true}, Res) || {Seed, Res} <- WBad],
    io:format("~p table schedules with every partition silent (~p with faults and copies added "
              "and removed, ~p under full load; ~p messages waited in a silently cut "
              "connection, ~p dropped by a full one, ~p cuts noticed after the tick time)~n",
              [QP + QF + WP + WF, QP + QF, WP + WF,
               maps:get(held_silent, QTot, 0) + maps:get(held_silent, WTot, 0),
               maps:get(dropped_busy, QTot, 0) + maps:get(dropped_busy, WTot, 0),
               maps:get(silent_noticed, QTot, 0) + maps:get(silent_noticed, WTot, 0)]),
    io:format("sim silent partitions: ~p passed, ~p failed~n", [QP + WP, QF + WF]),
    {GP, GF, GBad} = hm_sim_long:check_seeds(1, max(1, Count div 5)),
    [io:format("FAILED long-partition seed ~p: ~p~n", [Seed, Fs]) || {Seed, Fs} <- GBad],
    io:format("~p table schedules with one copy cut off for 18 simulated s under steady "
              "load, the log bounded: the log and the metadata stay within their bounds~n",
              [GP + GF]),
    io:format("sim long partition: ~p passed, ~p failed~n", [GP, GF]),
    {CP, CF, CTot, CBad} = hm_sim_crdt:check_seeds({1, Count}, #{}),
    [hm_sim_crdt:print_failure(Seed, Res) || {Seed, Res} <- CBad],
    io:format("~p CRDT schedules (type x flavor x ram/disc), ~p client ops, ~p messages, "
              "~p full states; faults injected: ~s~n",
              [CP + CF, maps:get(ops, CTot, 0), maps:get(msgs, CTot, 0),
               maps:get(full_states, CTot, 0), fault_line(CTot)]),
    io:format("sim crdt: ~p passed, ~p failed~n", [CP, CF]),
    {TP, TF, TTot, TBad} = check_seeds({1, Count}, #{crdt => true}),
    [print_failure(Seed, #{crdt => true}, Res) || {Seed, Res} <- TBad],
    io:format("~p CRDT-table schedules (type x flavor x epoch, ram/disc/mixed, copies added and "
              "removed), ~p updates (~p lost with a ram crash), ~p messages; faults injected: "
              "~s~n", [TP + TF, maps:get(ops, TTot, 0), maps:get(lost_with_ram_crash, TTot, 0),
                       maps:get(msgs, TTot, 0), fault_line(TTot)]),
    io:format("sim crdt-table: ~p passed, ~p failed~n", [TP, TF]),
    {FP, FF} = frag_family(Count, #{}, "partitioned-table", "sim frag",
                           "(fragments on a ring, writes from any node), ~p client ops"),
    {XP, XF} = frag_family(Count, #{crdt => any}, "partitioned CRDT-table", "sim frag crdt",
                           "(a type x flavor and an epoch per seed), ~p updates"),
    {DP, DF, DTot, DBad} = hm_sim_dotted:check_seeds({1, Count}, #{}),
    [hm_sim_dotted:print_failure(Seed, Res) || {Seed, Res} <- DBad],
    io:format("~s", [hm_sim_dotted:summary_line(DP, DF, DTot)]),
    io:format("sim: ~p passed, ~p failed~n",
              [P + MP + LP + SP + QP + WP + GP + CP + TP + FP + XP + DP,
               F + MF + LF + SF + QF + WF + GF + CF + TF + FF + XF + DF]),
    halt(case F + MF + LF + SF + QF + WF + GF + CF + TF + FF + XF + DF of 0 -> 0; _ -> 1 end);
main(["seed", S]) ->
    Seed = list_to_integer(S),
    {Cfg, Trace} = gen(Seed, #{}),
    Ok = replay(Seed, Cfg, Trace),
    {MCfg, MTrace} = gen(Seed, #{membership => true}),
    MOk = replay(Seed, MCfg, MTrace),
    {LCfg, LTrace} = gen(Seed, #{load => true}),
    LOk = replay(Seed, LCfg, LTrace),
    {QCfg, QTrace} = gen(Seed, #{membership => true, silent => true}),
    QOk = replay(Seed, QCfg, QTrace),
    {WCfg, WTrace} = gen(Seed, #{load => true, silent => true}),
    WOk = replay(Seed, WCfg, WTrace),
    {CCfg, CTrace} = hm_sim_crdt:gen(Seed, #{}),
    COk = hm_sim_crdt:replay(Seed, CCfg, CTrace),
    {TCfg, TTrace} = gen(Seed, #{crdt => true}),
    TOk = replay(Seed, TCfg, TTrace),
    FRes = hm_sim_frag:run_seed(Seed, #{}),
    io:format("partitioned-table seed ~p: ~p~n", [Seed, maps:get(failures, FRes)]),
    FOk = maps:get(ok, FRes),
    XRes = hm_sim_frag:run_seed(Seed, #{crdt => any}),
    io:format("partitioned CRDT-table seed ~p: ~p~n", [Seed, maps:get(failures, XRes)]),
    XOk = maps:get(ok, XRes),
    {DCfg, DTrace} = hm_sim_dotted:gen(Seed, #{}),
    DOk = hm_sim_dotted:replay(Seed, DCfg, DTrace),
    halt(case Ok andalso MOk andalso LOk andalso QOk andalso WOk andalso COk andalso TOk
             andalso FOk andalso XOk andalso DOk of
             true -> 0;
             false -> 1
         end);
main(["seed", S, File]) ->
    Seed = list_to_integer(S),
    Ok = case file:consult(File) of
             {ok, [{crdt, Cfg, Trace}]} -> hm_sim_crdt:replay(Seed, Cfg, Trace);
             {ok, [{dotted, Cfg, Trace}]} -> hm_sim_dotted:replay(Seed, Cfg, Trace);
             {ok, [{Cfg, Trace}]} -> replay(Seed, Cfg, Trace)
         end,
    halt(case Ok of true -> 0; false -> 1 end);
main(["report", File]) ->
    hm_sim_scale:report(File, [10, 50, 100, 200]),
    halt(0).

replay(Seed, Cfg, Trace) ->
    Res = #{ok := Ok} = run(Cfg, Trace),
    io:format("seed ~p: ~p~ntrace (~p actions): ~p~n", [Seed, Cfg, length(Trace), Trace]),
    case Ok of
        true ->
            io:format("stats: ~p~nsim tables: 1 passed, 0 failed~n",
                      [maps:without([samples], maps:get(stats, Res))]);
        false -> print_failure(Seed, {Cfg, Trace}, Res),
                 io:format("sim tables: 0 passed, 1 failed~n")
    end,
    Ok.

print_failure(Seed, Res) -> print_failure(Seed, #{}, Res).

%% The failing schedule: generated with `Opts', or given as `{Cfg, Trace}'.
print_failure(Seed, {Cfg, Trace}, #{failures := Fs}) ->
    print_failure(Seed, Cfg, Trace, Fs);
print_failure(Seed, Opts, #{failures := Fs}) ->
    {Cfg, Trace} = gen(Seed, Opts),
    print_failure(Seed, Cfg, Trace, Fs).

print_failure(Seed, Cfg, Trace, Fs) ->
    Desc = io_lib:format("~p, ~p, ~p, ~p replicas", [maps:get(type, Cfg), maps:get(policy, Cfg),
                                                     maps:get(storage, Cfg), maps:get(n, Cfg)]),
    print_minimised("seed", Seed, Desc, fun(T) -> run(Cfg, T) end, Trace, Fs,
                    "_build/sim/trace-" ++ integer_to_list(Seed) ++ ".eterm",
                    fun(Min) -> {Cfg, Min} end).

%% The mean simulated time from the end of the work phase to convergence.
converge_line(Tot, Runs) ->
    io_lib:format("~.1f simulated s on average", [maps:get(converged_ms, Tot, 0) / max(1, Runs) / 1000]).
