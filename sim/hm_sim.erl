%% @doc Deterministic simulator of EC tables (the Hypermnesia paper, §4.4–4.8, with the
%% durability of disc copies and partition tolerance): N copies of a table, each the
%% runtime's own per-table core ({@link hm_ec_table}, over {@link hm_tcsb} and
%% {@link hm_ec_key}) on a map store ({@link hm_ec_store_map}), in ONE Erlang process, a
%% seeded scheduler (`rand:seed_s', explicit state; simulated milliseconds, no wall clock)
%% and a faulty network. The simulator has no logic of its own for a table: what it runs is
%% what the runtime's server runs, message validation, sync waiters, membership checks and
%% node down included.
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
%% checkers 3-4 and minimiser as a driver module: {@link hm_sim_crdt}; so do the replica
%% groups under DottedDB replication: {@link hm_sim_dotted}.
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

-export([main/1, gen/2, run/2, run_seed/2, minimise/3, check_seeds/2, report/2, slow_load/0]).
%% The network, fault model and online checkers 3-4, shared with other drivers
%% ({@link hm_sim_crdt}): a driver puts `driver => Module' in the simulator state and
%% exports `event/2' (every scheduled event: ticks, deliveries, trace actions), `nodeup/3',
%% `action/2' (a trace action), `converged/1' and `quiescent/1'.
-export([drive/3, final_heal/1, quiesce/2, deliverable/4, nodes_of/1, draws/2, pick/2, gen_faults/4, schedule/3, schedule_at/3, run_until/2,
         uniform/2, coin/2, bump/2, bump/3, fail/2, up/2, connected/3, reachable/2, epoch/3,
         new_epoch/3, reconnect/2, send_all/3, events/3, minimise_with/3, totals/2, print_minimised/8,
         fault_line/1]).
-export_type([cfg/0, action/0, result/0]).

%% a copy's tick, and a busy copy's stability step between ticks: the runtime's schedule
-define(TICK, hm_ec_table_schedule:tick_ms()).
-define(ACK_MS, hm_ec_table_schedule:ack_ms()).
%% the load family's flow-control limit (hm_ec_table option `flow'), small enough that its
%% bursts reach it
-define(LOAD_FLOW, 32).
%% the load family's lag for catching up by state (odd seeds), well below its backlogs
-define(LOAD_CATCH_UP, 100).
%% a node whose writer waits for a held answer looks again this much later
-define(HELD_RETRY_MS, 10).
-define(KEYS, [k1, k2, k3]).
-define(VALUES, [a, b, c]).
-define(QUIESCE_CAP, 60000).
%% option `silent': a silent cut this long is noticed (the tick time), and the messages a
%% connection's buffers take when its link has no `link_cap'
-define(SILENT_NOTICED_MS, 2000).
-define(SILENT_BUFFER, 16).
%% a connection across a silent cut may stay silent this long after the heal, at most
-define(SILENT_LAG_MS, 1500).

-type cfg() :: #{n := pos_integer(), type := hm_ec_key:ec_type(),
                 policy := hm_ec_key:policy(), storage := ram | disc | mixed,
                 drop := float(), dup := float(), delay := pos_integer(),
                 duration := pos_integer(), seed := integer(), skew := #{node() => integer()},
                 keys => [term()], drop_replicate => float(), flow => pos_integer() | infinity,
                 catch_up => pos_integer() | infinity, log_limit => pos_integer() | infinity,
                 probe => {fun((non_neg_integer(), node(), [hm_ec_table:effect()],
                                hm_ec_table:state(), term()) -> term()), term()}}.
-type action() :: {non_neg_integer(), term()}.
-type result() :: #{ok := boolean(), failures := [term()], stats := map()}.

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
    Cfg1 = with_catch_up(Seed, 3, maps:merge(Cfg0, Opts)),
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

%% Catching up by state (hm_ec_table option `catch_up'): the copies of odd seeds with every
%% copy in ram take a member's state once `Lag' operations behind it (the table's few keys
%% are always fewer), as the runtime's copies of a table without a copy on disc do; the
%% others only catch up by operations. An option `catch_up' given is kept.
with_catch_up(_, _, Cfg = #{catch_up := _}) -> Cfg;
with_catch_up(Seed, Lag, Cfg = #{storage := ram}) when Seed rem 2 =:= 1 -> Cfg#{catch_up => Lag};
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

gen_ops(0, _, _, _, R) -> {[], R};
gen_ops(K, Nodes, Dur, Keys, R) ->
    {T, R1} = rand:uniform_s(Dur, R),
    {Nd, R2} = pick(Nodes, R1),
    {Key, R3} = pick(Keys, R2),
    {V, R4} = pick(?VALUES, R3),
    {X, R5} = rand:uniform_s(100, R4),
    Op = if X =< 55 -> {write, V};
            X =< 75 -> delete;
            X =< 97 -> {delete_object, V};
            true -> clear
         end,
    {Rest, R6} = gen_ops(K - 1, Nodes, Dur, Keys, R5),
    {[{T, {op, Nd, Key, Op}} | Rest], R6}.

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

%% A partition of a schedule made silent, and its heal: about half the connections across
%% the cut (each with a coin) lag, by up to ?SILENT_LAG_MS, and by less than what is left of
%% ?SILENT_NOTICED_MS since the cut (or its last change of shape) at the heal.
silent_action({T, {partition, Shape, Groups}}, _, {Acc, _, R}) ->
    {[{T, {silent, Shape, Groups}} | Acc], {T, Groups}, R};
silent_action({T, heal}, Universe, {Acc, {T0, Groups}, R}) ->
    Max = min(?SILENT_LAG_MS, T0 + ?SILENT_NOTICED_MS - T - 1),
    Pairs = [{A, B} || A <- Universe, B <- Universe, A < B, not same_side(A, B, Groups)],
    {Lags, R1} = lists:foldl(fun({A, B}, {L, Ra}) ->
                                     {U, Ra1} = rand:uniform_s(Ra),
                                     {Ms, Ra2} = rand:uniform_s(max(1, Max), Ra1),
                                     case U < 0.5 andalso Max >= 1 of
                                         true -> {[{A, B, Ms} | L], Ra2};
                                         false -> {L, Ra2}
                                     end
                             end, {[], R}, Pairs),
    {[{T, {heal, lists:reverse(Lags)}} | Acc], none, R1};
silent_action(A, _, {Acc, Cut, R}) ->
    {[A | Acc], Cut, R}.

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
run(Cfg = #{n := N, seed := Seed, duration := Dur}, Trace) ->
    Universe = nodes_of(N),
    %% `nodes' are the members (copy holders) now; a node that joins later starts without
    Nodes = Universe -- [Nd || {_, {add, Nd}} <- Trace],
    S0 = #{now => 0, seq => 0, q => gb_trees:empty(), cfg => Cfg, nodes => Nodes,
           universe => Universe,
           rand => rand:seed_s(exsss, {Seed, 16#e7, 16#ab}), reps => #{}, inc => #{},
           groups => all, epochs => #{}, applied => #{}, ops => #{}, failures => [],
           faults => true,
           stats => #{}, samples => []},
    try
        S1 = lists:foldl(fun(Nd, Acc) -> start_node(Nd, Acc) end,
                         S0#{reps := maps:from_list([{Nd, out} || Nd <- Universe])}, Nodes),
        S2 = lists:foldl(fun(Nd, Acc) ->
                                 {Off, Acc1} = uniform(?TICK, Acc),
                                 schedule(Off, {tick, Nd}, Acc1)
                         end, S1, Universe),
        S3 = lists:foldl(fun({T, A}, Acc) -> schedule_at(T, {action, A}, Acc) end, S2,
                         [{T, A} || {T, A} <- Trace, T < Dur]),
        S4 = run_until(Dur, S3),
        S5 = final_heal(S4),
        S6 = quiesce(Dur, S5),
        case Cfg of
            #{crdt := _} -> hm_sim_crdt_table:finish(S6);
            _ -> finish(S6)
        end
    catch Class:Reason:Stack ->
            #{ok => false, failures => [{exception, Class, Reason, lists:sublist(Stack, 6)}],
              stats => #{}}
    end.

%% @doc A driver's run from its initial state `S1' (replicas started): a tick chain for every
%% node, the trace's actions within the work phase, the work phase, the final heal,
%% quiescence, then `Finish'; an exception is a failure.
-spec drive(map(), [action()], fun((map()) -> result())) -> result().
drive(S1 = #{nodes := Nodes, cfg := #{duration := Dur}}, Trace, Finish) ->
    try
        S2 = lists:foldl(fun(Nd, Acc) ->
                                 {Off, Acc1} = uniform(?TICK, Acc),
                                 schedule(Off, {tick, Nd}, Acc1)
                         end, S1, Nodes),
        S3 = lists:foldl(fun({T, A}, Acc) -> schedule_at(T, {action, A}, Acc) end, S2,
                         [{T, A} || {T, A} <- Trace, T < Dur]),
        Finish(quiesce(Dur, final_heal(run_until(Dur, S3))))
    catch Class:Reason:Stack ->
            #{ok => false, failures => [{exception, Class, Reason, lists:sublist(Stack, 6)}],
              stats => #{}}
    end.

start_node(Nd, S = #{nodes := Nodes, inc := Inc}) ->
    {R, Effs} = new_replica(Nd, 1, Nodes, none, S),
    S1 = S#{reps := (maps:get(reps, S))#{Nd => R}, inc := Inc#{Nd => 1},
            applied := (maps:get(applied, S))#{Nd => #{}}},
    effects(Nd, Effs, S1).

%% A table copy of the runtime's own core (hm_ec_table) on a map store: fresh, or from what
%% a crash left (`Durable', a disc store).
new_replica(Nd, Inc, Members, Durable, S) ->
    {Type, Policy, Storage, TOpts} = storage3(Nd, S),
    Store = case Durable of
                none -> hm_ec_store_map:new(case Policy of siblings -> bag; _ -> set end,
                                            Storage);
                St -> St
            end,
    Cfg = maps:get(cfg, S),
    Flow = maps:with([flow, catch_up, log_limit], Cfg),
    hm_ec_table:new(maps:merge(#{tab => sim, type => Type, policy => Policy, record => {r, 3},
                                 cookie => sim, node => Nd, incarnation => Inc,
                                 members => Members, store => Store, events => true,
                                 tcsb => TOpts},
                               maps:merge(Flow, hm_sim_crdt_table:replica_opts(Cfg)))).

%% Carry out a replica's effects: its sends go through the network, its events to the
%% checkers; replies, timers, log lines need nothing here; dropped messages are counted.
effects(Nd, Effs, S0) ->
    S = probe(Nd, Effs, S0),
    {Out, S1a} = lose_replicate([{To, M} || {send, To, M} <- Effs], S),
    Ev = [E || {event, E} <- Effs],
    S1 = case [D || {drop, D} <- Effs] of
             [] -> S1a;
             Ds -> bump(dropped_invalid, length(Ds), S1a)
         end,
    send_all(Nd, Out, events(Nd, Ev, timers(Nd, Effs, S1))).

%% Option `probe => {Fun, Acc0}' (a measurement hook for benchmarks): after every step of a
%% copy, `Fun(Now, Node, Effects, Copy, Acc)' folds what the step did (the copy's effects,
%% its sends and events included, before the network sees them) and the copy's new state
%% into an accumulator of the caller's, returned as the run's stat `probe'. It only looks:
%% the run is the same with or without it.
probe(Nd, Effs, S = #{cfg := #{probe := {F, Acc0}}, now := Now, reps := Reps}) ->
    S#{probe_acc => F(Now, Nd, Effs, maps:get(Nd, Reps), maps:get(probe_acc, S, Acc0))};
probe(_, _, S) -> S.

%% Option `drop_replicate': the share of operations' first transmissions (`{op, Msg}', sent
%% when an operation is made) lost while random faults are on; retransmissions and
%% acknowledgements go through (DottedDB's replication message loss, 10 % or 100 %, as
%% hm_sim_dotted applies it to replicate-on-write messages).
lose_replicate(Out, S = #{cfg := #{drop_replicate := P}, faults := true}) ->
    {Kept, S1} = lists:foldl(fun(O = {_, M}, {Acc, Sx}) when element(1, M) =:= op ->
                                     case coin(P, Sx) of
                                         {true, Sy} -> {Acc, bump(dropped_replicate, Sy)};
                                         {false, Sy} -> {[O | Acc], Sy}
                                     end;
                                (O, {Acc, Sx}) -> {[O | Acc], Sx}
                             end, {[], S}, Out),
    {lists:reverse(Kept), S1};
lose_replicate(Out, S) -> {Out, S}.

%% A CRDT table's timers (the broadcast epoch) go off on the copy that set them, unless it
%% went down meanwhile; a table of records sets none the simulator needs.
timers(Nd, Effs, S = #{cfg := #{crdt := _}, inc := Incs}) ->
    lists:foldl(fun({timer, Ms, Msg}, Acc) ->
                        schedule(Ms, {timer, Nd, maps:get(Nd, Incs, 0), Msg}, Acc);
                   (_, Acc) -> Acc
                end, S, Effs);
timers(_, _, S) -> S.

rows(R) -> hm_ec_store_map:rows_map(hm_ec_table:store(R)).
meta(R) -> hm_ec_store_map:meta_map(hm_ec_table:store(R)).

storage3(Nd, #{cfg := Cfg = #{type := T, policy := P, storage := St}} = S) ->
    Nodes = maps:get(universe, S, maps:get(nodes, S)),
    Storage = case St of
                  mixed -> case index(Nd, Nodes) rem 2 of 0 -> disc; 1 -> ram end;
                  _ -> St
              end,
    {T, P, Storage, maps:with([window], Cfg)}.

index(X, L) -> length(lists:takewhile(fun(Y) -> Y =/= X end, L)) + 1.

%% @doc A uniform integer in 1..N from the simulator's random state.
-spec uniform(pos_integer(), map()) -> {pos_integer(), map()}.
uniform(N, S = #{rand := R}) -> {X, R1} = rand:uniform_s(N, R), {X, S#{rand := R1}}.
%% @doc True with probability `P'.
-spec coin(float(), map()) -> {boolean(), map()}.
coin(P, S = #{rand := R}) -> {U, R1} = rand:uniform_s(R), {U < P, S#{rand := R1}}.

%% @doc Schedule event `Ev' `Delay' simulated ms from now (or at time `T': schedule_at/3).
-spec schedule(non_neg_integer(), term(), map()) -> map().
schedule(Delay, Ev, S = #{now := Now}) -> schedule_at(Now + Delay, Ev, S).
-spec schedule_at(non_neg_integer(), term(), map()) -> map().
schedule_at(T, Ev, S = #{q := Q, seq := Seq}) ->
    S#{q := gb_trees:insert({T, Seq}, Ev, Q), seq := Seq + 1}.

%% @doc Add 1 (or `N') to statistic `K'.
-spec bump(term(), map()) -> map().
bump(K, S) -> bump(K, 1, S).
-spec bump(term(), integer(), map()) -> map().
bump(K, N, S = #{stats := St}) -> S#{stats := St#{K => maps:get(K, St, 0) + N}}.

%% @doc Run every event scheduled up to simulated time `T'.
-spec run_until(non_neg_integer(), map()) -> map().
run_until(T, S = #{q := Q}) ->
    case gb_trees:is_empty(Q) of
        true -> S#{now := T};
        false ->
            case gb_trees:smallest(Q) of
                {{At, _}, _} when At > T -> S#{now := T};
                {{At, _} = K, Ev} ->
                    S0 = S#{now := At, q := gb_trees:delete(K, Q)},
                    S1 = case Ev of
                             {deliver, From, To, _, _} -> in_flight(From, To, -1, S0);
                             _ -> S0
                         end,
                    run_until(T, event(Ev, S1))
            end
    end.

%% @doc Whether node `Nd' is up (its replica is a map, not `{down, ...}').
-spec up(node(), map()) -> boolean().
up(Nd, #{reps := Reps}) ->
    case maps:get(Nd, Reps) of
        {down, _, _} -> false;
        out -> false;
        _ -> true
    end.

%% @doc Whether the current partition lets `A' and `B' talk.
-spec connected(node(), node(), map()) -> boolean().
connected(A, A, _) -> true;
connected(_, _, #{groups := all}) -> true;
connected(A, B, #{groups := Gs}) -> same_side(A, B, Gs).

%% Whether `A' and `B' are in one of the groups of a partition.
same_side(A, B, Groups) ->
    lists:any(fun(G) -> lists:member(A, G) andalso lists:member(B, G) end, Groups).

%% @doc The other nodes that are up and connected to `Nd'.
-spec reachable(node(), map()) -> [node()].
reachable(Nd, S = #{nodes := Nodes}) ->
    [M || M <- Nodes, M =/= Nd, up(M, S), connected(Nd, M, S)].

event(Ev, S = #{driver := D}) -> D:event(Ev, S);
event({tick, Nd}, S) ->
    S1 = schedule(?TICK, {tick, Nd}, S),
    case up(Nd, S1) of
        false -> S1;
        true ->
            R = maps:get(Nd, maps:get(reps, S1)),
            {R1, Effs} = hm_ec_table:tick(reachable(Nd, S1), R),
            %% stat `buffered_ticks': operations received and waiting in a causal buffer for
            %% one they depend on, summed over ticks and replicas
            S2 = sample(Nd, R1, put_rep(Nd, R1, bump(buffered_ticks,
                                                     hm_tcsb:pending(hm_ec_table:tcsb(R1)),
                                                     S1))),
            effects(Nd, Effs, S2)
    end;
event({deliver, From, To, Msg, Epoch}, S) ->
    %% Erlang distribution: a message lives only as long as the connection it was sent on
    case deliverable(From, To, Epoch, S) of
        false -> bump(dropped_cut, S);
        true ->
            case passes(From, To, S) of
                true -> receive_msg(From, To, Msg, S);
                false -> hold(From, To, Msg, Epoch, S)
            end
    end;
event({silent_noticed, N}, S = #{silent_n := N, silent := Groups}) when Groups =/= all ->
    %% the tick time ran out: the nodes see the cut, and what waited is lost
    Held = maps:get(held, S, #{}),
    S1 = maps:fold(fun({From, To}, Ms, Acc) ->
                           bump(dropped_cut, length(Ms), in_flight(From, To, -length(Ms), Acc))
                   end, S#{held => #{}, silent := all, lagging => #{}}, Held),
    bump(silent_noticed, reconnect(S1#{groups := Groups}, S1));
event({silent_noticed, _}, S) ->
    S;
event({link_back, A, B}, S = #{now := Now}) ->
    %% a connection silent after the heal carries traffic again (unless a later heal made
    %% it lag longer)
    L = maps:get(lagging, S, #{}),
    case L of
        #{{A, B} := Until} when Until =< Now ->
            bump(silent_lagged, release(S#{lagging => maps:without([{A, B}, {B, A}], L)}));
        _ -> S
    end;
event({apply, From, To, Msg, Inc}, S = #{inc := Incs}) ->
    %% a member's operations, taken from the receiver's queue once it had time for them
    case up(To, S) andalso maps:get(To, Incs) =:= Inc of
        false -> bump(dropped_queued, S);
        true -> handle_msg(From, To, Msg, S)
    end;
event({action, A = {op, Nd, _, _}}, S) ->
    %% flow control: the node's writer waits while the answer to a write is held back (a
    %% member lags on its operations); its operations wait in order behind it
    Waiting = maps:get(writer_waits, S, #{}),
    case is_map_key(Nd, Waiting) orelse held(Nd, S) of
        true ->
            W = maps:get(Nd, Waiting, []),
            S1 = S#{writer_waits => Waiting#{Nd => W ++ [A]}},
            bump(ops_held, case W of
                               [] -> schedule(?HELD_RETRY_MS, {resume, Nd}, S1);
                               _ -> S1
                           end);
        false -> action(A, bump(actions, S))
    end;
event({resume, Nd}, S = #{writer_waits := Waiting}) ->
    resume(Nd, maps:get(Nd, Waiting), S#{writer_waits := maps:remove(Nd, Waiting)});
event({action, A}, S) ->
    action(A, bump(actions, S));
event({ack, Nd, Inc}, S = #{inc := Incs}) ->
    S1 = S#{acks_armed => maps:remove({Nd, Inc}, maps:get(acks_armed, S, #{}))},
    case up(Nd, S1) andalso maps:get(Nd, Incs) =:= Inc of
        false -> S1;
        true ->
            {R1, Effs} = hm_ec_table:acknowledge(reachable(Nd, S1),
                                                 maps:get(Nd, maps:get(reps, S1))),
            effects(Nd, Effs, put_rep(Nd, R1, S1))
    end;
event({timer, Nd, Inc, Msg}, S = #{inc := Incs}) ->
    case up(Nd, S) andalso maps:get(Nd, Incs) =:= Inc of
        false -> S;
        true ->
            {R1, Effs} = hm_ec_table:timeout(Msg, maps:get(Nd, maps:get(reps, S))),
            effects(Nd, Effs, put_rep(Nd, R1, S))
    end.

put_rep(Nd, R, S = #{reps := Reps}) -> S#{reps := Reps#{Nd => R}}.

%% Whether copy `Nd' holds back the answer to one of its writes (flow control).
held(Nd, S = #{reps := Reps}) ->
    up(Nd, S) andalso hm_ec_table:held(maps:get(Nd, Reps)) > 0.

%% The writer of `Nd' goes on with the operations that waited, in order, while no answer is
%% held back; it checks again ?HELD_RETRY_MS later when one is.
resume(_, [], S) -> S;
resume(Nd, As = [A | Rest], S) ->
    case held(Nd, S) of
        true ->
            schedule(?HELD_RETRY_MS, {resume, Nd},
                     S#{writer_waits := (maps:get(writer_waits, S))#{Nd => As}});
        false -> resume(Nd, Rest, action(A, bump(actions, S)))
    end.

%% A message arrives at `To'. With option `service' (µs a member's operation costs the
%% receiver), members' operations wait in the receiver's queue and are applied one after the
%% other, each taking that long, while everything else (acknowledgements, ticks, local
%% writes) goes first, as the runtime's table process does (hm_ec_table_server); without
%% it, a receiver applies everything at once.
receive_msg(From, To, Msg, S = #{cfg := #{service := Us}, now := Now, inc := Incs})
  when element(1, Msg) =:= op; element(1, Msg) =:= ops ->
    Inc = maps:get(To, Incs),
    Busy = maps:get(busy, S, #{}),
    Start = max(Now * 1000, maps:get({To, Inc}, Busy, 0)),
    %% a retransmission round is applied a few operations at a time, as the runtime does
    %% (hm_ec_table_schedule:batches/1), each batch once the receiver had time for it
    Batches = case Msg of
                  {op, _} -> [Msg];
                  {ops, L} -> [{ops, B} || B <- hm_ec_table_schedule:batches(L)]
              end,
    {Done, S1} = lists:foldl(fun(B, {At, Acc}) ->
                                     N = case B of {op, _} -> 1; {ops, BL} -> length(BL) end,
                                     At1 = At + N * Us,
                                     {At1, schedule_at((At1 + 999) div 1000,
                                                       {apply, From, To, B, Inc}, Acc)}
                             end, {Start, S}, Batches),
    S1#{busy => Busy#{{To, Inc} => Done}};
receive_msg(From, To, Msg, S) -> handle_msg(From, To, Msg, S).

handle_msg(From, To, Msg, S) ->
    {R1, Effs} = hm_ec_table:handle(From, sim, Msg, maps:get(To, maps:get(reps, S))),
    effects(To, Effs, put_rep(To, R1, arm_ack(To, S))).

%% A copy that took a write, a member's operations or an acknowledgement runs its stability
%% step (hm_ec_table:acknowledge/2) ?ACK_MS later, as the runtime's table process does.
arm_ack(Nd, S = #{inc := Incs}) ->
    Armed = maps:get(acks_armed, S, #{}),
    Key = {Nd, maps:get(Nd, Incs, 0)},
    case Armed of
        #{Key := _} -> S;
        _ -> schedule(?ACK_MS, {ack, Nd, element(2, Key)}, S#{acks_armed => Armed#{Key => true}})
    end.

%% @doc Whether a message sent from `From' to `To' on connection `Epoch' arrives now: Erlang
%% distribution, a message lives only as long as the connection it was sent on.
-spec deliverable(node(), node(), non_neg_integer(), map()) -> boolean().
deliverable(From, To, Epoch, S) ->
    up(To, S) andalso connected(From, To, S) andalso epoch(From, To, S) =:= Epoch.

action({op, Nd, Key, Spec}, S = #{now := Now, cfg := #{skew := Skew}}) ->
    case up(Nd, S) andalso hm_ec_table:status(maps:get(Nd, maps:get(reps, S))) of
        false -> bump(ops_skipped, S);
        syncing -> bump(ops_refused, S);             % hm_ec_server refuses: {syncing, Tab}
        ready when element(1, Spec) =:= update ->
            %% a CRDT table's update (hm_sim_crdt_table)
            {R1, Effs, S1} = hm_sim_crdt_table:update(Nd, Key, element(2, Spec),
                                                      maps:get(Nd, maps:get(reps, S)), S),
            effects(Nd, Effs, put_rep(Nd, R1, arm_ack(Nd, S1)));
        ready ->
            Rec = fun(V) -> {r, Key, V} end,
            KeyOp = case Spec of
                        {write, V} -> {Key, {write, Rec(V)}};
                        delete -> {Key, delete};
                        {delete_object, V} -> {Key, {delete_object, Rec(V)}};
                        clear -> {all, clear}
                    end,
            Clock = Now * 1000 + maps:get(Nd, Skew),
            {R1, Effs} = hm_ec_table:submit(KeyOp, async, client, {Clock, reachable(Nd, S)},
                                            maps:get(Nd, maps:get(reps, S))),
            [Msg = {O, Ts, {_, _, Op}} | _] = [M || {event, {applied, M}} <- Effs],
            Dot = {O, maps:get(O, Ts)},
            Info = #{dot => Dot, ts => Ts, key => element(1, KeyOp), op => Op,
                     holders => [], lost => false, msg => Msg},
            S1 = put_rep(Nd, R1, S#{ops := (maps:get(ops, S))#{Dot => Info}}),
            effects(Nd, Effs, bump(ops, arm_ack(Nd, S1)))
    end;
action({add, Nd}, S = #{nodes := Nodes, inc := Incs}) ->
    case lists:member(Nd, Nodes) of
        true -> S;
        false ->
            %% add_table_copy: every member learns the new member set; the new copy starts
            %% empty and catches up by state transfer
            Ms = lists:sort([Nd | Nodes]),
            S1 = set_members(Ms, S#{nodes := Ms}),
            Inc = maps:get(Nd, Incs, 0) + 1,
            {R, Effs} = new_replica(Nd, Inc, Ms, none, S1),
            S2 = S1#{reps := (maps:get(reps, S1))#{Nd => R}, inc := Incs#{Nd => Inc},
                     applied := (maps:get(applied, S1))#{Nd => #{}}},
            S3 = effects(Nd, Effs, bump(adds, S2)),
            lists:foldl(fun(M, Acc) -> nodeup(M, Nd, nodeup(Nd, M, Acc)) end, S3,
                        reachable(Nd, S3))
    end;
action({remove, Nd}, S = #{nodes := Nodes, reps := Reps, ops := Ops}) ->
    case lists:member(Nd, Nodes) andalso length(Nodes) > 1 of
        false -> S;
        true ->
            %% del_table_copy: the copy is gone for good (what only it delivered is lost),
            %% its links break, every member learns the new member set
            Ops1 = maps:map(fun(_, I = #{holders := H}) ->
                                    H1 = lists:delete(Nd, H),
                                    I#{holders := H1, lost := maps:get(lost, I) orelse H1 =:= []}
                            end, Ops),
            Ms = Nodes -- [Nd],
            S1 = lists:foldl(fun(M, Acc) -> new_epoch(Nd, M, Acc) end, S, Ms),
            S2 = hm_sim_crdt_table:mark_lost(S1#{nodes := Ms, reps := Reps#{Nd := out},
                                                 ops := Ops1}),
            bump(removes, set_members(Ms, S2))
    end;
action({partition, Shape, Groups}, S) ->
    bump({partition, Shape}, reconnect(S#{groups := Groups}, S));
action({silent, Shape, Groups}, S = #{now := Now}) ->
    N = maps:get(silent_n, S, 0) + 1,
    S1 = release(S#{silent => Groups, silent_n => N}),
    bump({silent, Shape}, schedule_at(Now + ?SILENT_NOTICED_MS, {silent_noticed, N}, S1));
action(heal, S) ->
    action({heal, []}, S);
action({heal, Lags}, S = #{now := Now}) ->
    %% the connections of `Lags' stay silent `Ms' more
    S1 = lists:foldl(fun({A, B, Ms}, Acc) ->
                             L = maps:get(lagging, Acc, #{}),
                             schedule(Ms, {link_back, A, B},
                                      Acc#{lagging => L#{{A, B} => Now + Ms, {B, A} => Now + Ms}})
                     end, S, Lags),
    reconnect((release(S1#{silent => all}))#{groups := all}, S);
action({crash, Nd}, S) ->
    action({crash, Nd, random}, S);
action({crash, Nd, Kept}, S) ->
    case up(Nd, S) of
        false -> S;
        true ->
            %% every link of Nd breaks; the members connected to it see a nodedown
            Others = maps:get(nodes, S) -- [Nd],
            S1 = lists:foldl(fun(M, Acc) -> nodedown(M, Nd, new_epoch(Nd, M, Acc)) end, S,
                             [M || M <- Others, up(M, S), connected(Nd, M, S)]),
            S2 = lists:foldl(fun(M, Acc) -> new_epoch(Nd, M, Acc) end, S1,
                             [M || M <- Others, not up(M, S) orelse not connected(Nd, M, S)]),
            bump(crashes, take_down(Nd, Kept, S2))
    end;
action({restart, Nd}, S) ->
    case bring_up(Nd, S) of
        {ok, S1} ->
            S2 = bump(restarts, S1),
            lists:foldl(fun(M, Acc) -> nodeup(M, Nd, nodeup(Nd, M, Acc)) end, S2,
                        reachable(Nd, S2));
        none -> S
    end;
action({mnesia_stop, Nd}, S) ->
    %% Mnesia alone stops on Nd (hypermnesia keeps running, the node stays connected): the
    %% table's process goes with it. The other members' Mnesia reports mnesia_down, which
    %% their table processes take as a nodedown; Mnesia handles it before Nd's Mnesia may
    %% join again, so before a new copy of Nd exists, and after what Nd's old process sent
    %% (here: what is in flight to or from Nd is lost)
    case up(Nd, S) of
        false -> S;
        true ->
            S1 = lists:foldl(fun(M, Acc) -> nodedown(M, Nd, new_epoch(Nd, M, Acc)) end, S,
                             maps:get(nodes, S) -- [Nd]),
            bump(mnesia_stops, take_down(Nd, random, S1))
    end;
action({mnesia_start, Nd}, S) ->
    %% Mnesia is back: the ram copy comes back empty (a new incarnation that syncs), a disc
    %% copy from its disc state; nobody saw a nodedown or a nodeup
    case bring_up(Nd, S) of
        {ok, S1} -> S1;
        none -> S
    end.

%% Nd's copy stops (a crash, or Mnesia stopping there): what survives is its durable store,
%% the state after a prefix of the updates made since its last sync (Mnesia writes its log
%% asynchronously): a random one, or the first `Keep' (trace action `{crash, Nd, Keep}', `Keep'
%% a count or `all').
%% A ram copy, or a disc one with no durable broadcast state (it will take a snapshot), no
%% longer holds what it delivered; a disc one holds what its durable delivered vector says,
%% and checker 3 continues from there.
take_down(Nd, Keep, S0 = #{reps := Reps, ops := Ops, applied := Ap}) ->
    St = hm_ec_table:store(maps:get(Nd, Reps)),
    Unsynced = hm_ec_store_map:unsynced(St),
    {Kept, S1} = case Keep of
                     random -> {K1, Sx} = uniform(Unsynced + 1, S0), {K1 - 1, Sx};
                     all -> {Unsynced, S0};
                     _ -> {min(Keep, Unsynced), S0}
                 end,
    D = hm_ec_store_map:durable(St, Kept),
    State = case D of
                none -> false;
                _ -> lists:keyfind(state, 1, hm_ec_store:log_read(D))
            end,
    Stateful = State =/= false,
    Held = case State of
               {state, {_, V}} -> V;
               false -> #{}
           end,
    Ops1 = maps:map(fun(Dot, I = #{holders := H}) ->
                            case lists:member(Nd, H) andalso not hm_vv:contains(Dot, Held) of
                                true ->
                                    H1 = lists:delete(Nd, H),
                                    I#{holders := H1,
                                       lost := maps:get(lost, I) orelse H1 =:= []};
                                false -> I
                            end
                    end, Ops),
    S = S1#{reps := Reps#{Nd => {down, D, Stateful}}, ops := Ops1, applied := Ap#{Nd := Held}},
    hm_sim_crdt_table:mark_lost(S).

%% Nd's copy starts again from what survived, as a new incarnation; `none' if it is not down.
bring_up(Nd, S = #{reps := Reps, inc := Incs, nodes := Nodes}) ->
    case maps:get(Nd, Reps) of
        {down, D, _} ->
            Inc = maps:get(Nd, Incs) + 1,
            {R, Effs} = new_replica(Nd, Inc, Nodes, D, S),
            Applied = case hm_ec_table:status(R) of
                          ready -> maps:get(Nd, maps:get(applied, S));
                          syncing -> #{}
                      end,
            S1 = S#{reps := Reps#{Nd => R}, inc := Incs#{Nd => Inc},
                    applied := (maps:get(applied, S))#{Nd => Applied}},
            {ok, effects(Nd, Effs, S1)};
        _ -> none
    end.

%% Every member that is up takes the new member set (a crashed one gets it when it restarts).
set_members(Ms, S = #{reps := Reps}) ->
    S#{reps := maps:map(fun(_Nd, R = {down, _, _}) -> R;
                           (_Nd, out) -> out;
                           (Nd, R) ->
                                case lists:member(Nd, Ms) of
                                    true -> hm_ec_table:set_members(Ms, R);
                                    false -> R
                                end
                        end, Reps)}.

%% @doc Pairs connected now (`S1a') and not before (`S0') get a nodeup both ways; links
%% the new partition cuts lose what is in flight on them.
-spec reconnect(map(), map()) -> map().
reconnect(S1a, S0 = #{nodes := Nodes}) ->
    %% links cut by the new partition lose what was in flight on them
    Cut = [{A, B} || A <- Nodes, B <- Nodes, A < B, connected(A, B, S0),
                     not connected(A, B, S1a)],
    S1 = lists:foldl(fun({A, B}, Acc) -> nodedown(A, B, nodedown(B, A, new_epoch(A, B, Acc)))
                     end, S1a, Cut),
    New = [{A, B} || A <- Nodes, B <- Nodes, A < B, up(A, S1), up(B, S1),
                     connected(A, B, S1), not connected(A, B, S0)],
    lists:foldl(fun({A, B}, Acc) -> nodeup(A, B, nodeup(B, A, Acc)) end, S1, New).

%% Connection epochs: every time the link between two nodes breaks (a cut, a crash of either
%% end), messages sent on it before are lost, as with Erlang distribution (a node's new
%% connection, or new incarnation, never receives the old one's traffic).
link_key(A, B) when A =< B -> {A, B};
link_key(A, B) -> {B, A}.

%% @doc The current connection epoch of the link between `A' and `B'; new_epoch/3 breaks it.
-spec epoch(node(), node(), map()) -> non_neg_integer().
epoch(A, B, #{epochs := E}) -> maps:get(link_key(A, B), E, 0).

-spec new_epoch(node(), node(), map()) -> map().
new_epoch(A, B, S = #{epochs := E}) ->
    L = link_key(A, B),
    S#{epochs := E#{L => maps:get(L, E, 0) + 1}}.

nodeup(At, Peer, S = #{driver := D}) -> D:nodeup(At, Peer, S);
nodeup(At, Peer, S) -> link_event(At, fun(R) -> hm_ec_table:nodeup(Peer, R) end, S).

%% `At' sees `Peer' go down (a cut, or Peer crashed): the runtime's nodedown.
nodedown(_At, _Peer, S = #{driver := _}) -> S;
nodedown(At, Peer, S) -> link_event(At, fun(R) -> hm_ec_table:nodedown(Peer, R) end, S).

%% A node event for the copy on `At', if it is up.
link_event(At, Step, S = #{reps := Reps}) ->
    case up(At, S) of
        true ->
            {R1, Effs} = Step(maps:get(At, Reps)),
            effects(At, Effs, S#{reps := Reps#{At := R1}});
        false -> S
    end.

%% A state that left out the keys its receivers have (hm_ec_table:merge_state/2), counted:
%% hm_sim_tests checks that the runs take that path.
left_out({merge, #{rows := {left_out, _, _}}}, S) -> bump(left_out_states, S);
left_out(_, S) -> S.

%% @doc Send `[{To, Msg}]' from `From' through the faulty network (drop, duplicate, delay).
-spec send_all(node(), [{node(), tuple()}], map()) -> map().
send_all(From, Out, S) -> lists:foldl(fun({To, Msg}, Acc) -> send(From, To, Msg, Acc) end,
                                      S, Out).

send(From, To, Msg, S0 = #{cfg := Cfg}) ->
    S = left_out(Msg, bump({msg, element(1, Msg)}, bump(msgs, wire_bytes(Msg, Cfg, S0)))),
    case connected(From, To, S) of
        false -> bump(dropped_cut, S);
        true ->
            %% a state waits for room, as the runtime's table process sends it
            case not hm_ec_wire:is_state_transfer(Msg) andalso busy(From, To, S) of
                true -> bump({dropped_busy, element(1, Msg)}, bump(dropped_busy, S));
                false ->
                    case passes(From, To, S) of
                        true -> send_now(From, To, Msg, S);
                        false -> hold(From, To, Msg, epoch(From, To, S), S)
                    end
            end
    end.

send_now(From, To, Msg, S = #{cfg := #{drop := PD, dup := PU, delay := Max}, faults := F}) ->
    {Drop, S1} = case F of true -> coin(PD, S); false -> {false, S} end,
    case Drop of
        true -> bump(dropped, S1);
        false ->
            {D1, S2} = uniform(Max, S1),
            E = epoch(From, To, S2),
            S3 = schedule(D1, {deliver, From, To, Msg, E}, in_flight(From, To, 1, S2)),
            {Dup, S4} = case F of true -> coin(PU, S3); false -> {false, S3} end,
            case Dup of
                false -> S4;
                true ->
                    {D2, S5} = uniform(Max, S4),
                    bump(duplicated, schedule(D2, {deliver, From, To, Msg, E},
                                              in_flight(From, To, 1, S5)))
            end
    end.

%%% ---------------------------------------------------------------- silent cuts

%% Whether a message from `A' gets through to `B' now: not across a silent cut (option
%% `silent'), where the nodes stay connected, nor on a connection still silent after the
%% heal.
passes(A, A, _) -> true;
passes(A, B, S) ->
    case maps:get(lagging, S, #{}) of
        #{{A, B} := _} -> false;
        _ ->
            case maps:get(silent, S, all) of
                all -> true;
                Gs -> same_side(A, B, Gs)
            end
    end.

%% A message waits in the buffers of a silently cut connection, counted in flight; beyond
%% the link's `link_cap' (busy/3, already) or ?SILENT_BUFFER, it is dropped, as `nosuspend'
%% drops it; a state waits for room.
hold(From, To, Msg, Epoch, S) ->
    Held = maps:get(held, S, #{}),
    Ms = maps:get({From, To}, Held, []),
    case length(Ms) >= ?SILENT_BUFFER andalso not hm_ec_wire:is_state_transfer(Msg) of
        true -> bump({dropped_busy, element(1, Msg)}, bump(dropped_busy, S));
        false ->
            S1 = S#{held => Held#{{From, To} => [{Msg, Epoch} | Ms]}},
            bump(held_silent, in_flight(From, To, 1, S1))
    end.

%% The messages held on links that let them through now go on, in the order they were sent,
%% from a tick on, a millisecond apart (TCP's retransmission timer, backed off during the
%% cut, fires again); still counted in flight.
release(S) ->
    {Go, Stay} = lists:partition(fun({{From, To}, _}) -> passes(From, To, S) end,
                                 maps:to_list(maps:get(held, S, #{}))),
    lists:foldl(fun({{From, To}, Ms}, Acc) ->
                        element(2, lists:foldl(
                                     fun({Msg, E}, {D, Sx}) ->
                                             {D + 1, schedule(D, {deliver, From, To, Msg, E}, Sx)}
                                     end, {?TICK, Acc}, lists:reverse(Ms)))
                end, S#{held => maps:from_list(Stay)}, Go).

%% With option `bytes': the bytes every message sent takes in the external term format (what
%% Erlang distribution carries, before its atom cache).
wire_bytes(Msg, #{bytes := true}, S) -> bump(bytes, byte_size(term_to_binary(Msg)), S);
wire_bytes(_, _, S) -> S.

%% A link with `link_cap' messages in flight is busy: a message sent on it now is dropped, as
%% Erlang distribution does with `nosuspend' when the connection's buffer is full.
busy(From, To, #{cfg := #{link_cap := Cap}} = S) ->
    maps:get({From, To}, maps:get(in_flight, S, #{}), 0) >= Cap;
busy(_, _, _) -> false.

in_flight(From, To, D, S = #{cfg := #{link_cap := _}}) ->
    F = maps:get(in_flight, S, #{}),
    S#{in_flight => F#{{From, To} => maps:get({From, To}, F, 0) + D}};
in_flight(_, _, _, S) -> S.

%%% ================================================================ checkers 3 and 4

%% @doc Record a checker failure (at most 20 a run).
-spec fail(term(), map()) -> map().
fail(What, S = #{failures := Fs, now := Now}) when length(Fs) < 20 ->
    S#{failures := Fs ++ [{Now, What}]};
fail(_, S) -> S.

%% @doc Checkers 3 (causal delivery: `{applied, Msg}') and 4 (stability safety:
%% `{stabilized, Dots}') on the events of replica `Nd'; `{installed, V}' sets its vector.
-spec events(node(), [hm_ec_table:event()], map()) -> map().
events(Nd, Evs, S) -> lists:foldl(fun(E, Acc) -> ev(Nd, E, Acc) end, S, Evs).

ev(Nd, {applied, {O, Ts, _}}, S = #{applied := Ap, ops := Ops}) ->
    A = maps:get(Nd, Ap),
    Seq = maps:get(O, Ts),
    Ok = Seq =:= hm_vv:get(O, A) + 1 andalso
        lists:all(fun({R, C}) -> R =:= O orelse C =< hm_vv:get(R, A) end, maps:to_list(Ts)),
    S1 = case Ok of
             true -> S;
             false -> fail({causal_delivery, Nd, {O, Seq}, Ts, {delivered_before, A}}, S)
         end,
    Dot = {O, Seq},
    Ops1 = case Ops of
               #{Dot := I = #{holders := H}} -> Ops#{Dot := I#{holders := lists:usort([Nd | H])}};
               _ -> Ops
           end,
    S1#{applied := Ap#{Nd := A#{O => max(Seq, hm_vv:get(O, A))}}, ops := Ops1};
ev(Nd, {installed, V}, S = #{applied := Ap, ops := Ops}) ->
    bump(installs, S#{applied := Ap#{Nd := V}, ops := holds(Nd, V, Ops)});
ev(Nd, {merged, V}, S = #{applied := Ap, ops := Ops}) ->
    %% caught up by state: what the member delivered counts as delivered here too
    bump(merges, S#{applied := Ap#{Nd := hm_vv:join(maps:get(Nd, Ap), V)},
                    ops := holds(Nd, V, Ops)});
ev(_Nd, {stabilized, []}, S) -> S;
ev(Nd, {stabilized, Dots}, S = #{nodes := Nodes, reps := Reps, applied := Ap}) ->
    Judges = [M || M <- Nodes, M =/= Nd,
                   case maps:get(M, Reps) of
                       {down, _, Stateful} -> Stateful;
                       R -> ready(R)
                   end],
    Bad = [{Dot, M} || Dot <- Dots, M <- Judges, not hm_vv:contains(Dot, maps:get(M, Ap))],
    case Bad of
        [] -> bump(stabilized_dots, length(Dots), S);
        _ -> fail({unsafe_stability, Nd, {not_delivered_by, lists:sublist(Bad, 5)}}, S)
    end.

%% Copy `Nd' holds every operation `V' covers (a state it installed or joined).
holds(Nd, V, Ops) ->
    maps:map(fun(Dot, I = #{holders := H}) ->
                     case hm_vv:contains(Dot, V) of
                         true -> I#{holders := lists:usort([Nd | H])};
                         false -> I
                     end
             end, Ops).

%% A replica that counts for checker 4: a table copy, or a CRDT driver's replica (a map).
ready(#{status := St}) -> St =:= ready;
ready(R) -> hm_ec_table:status(R) =:= ready.

%%% ================================================================ quiescence and checks

%% @doc The end of the work phase: heal every partition, turn random faults off, restart
%% every crashed replica.
-spec final_heal(map()) -> map().
final_heal(S = #{nodes := Nodes, reps := Reps}) ->
    S0 = release(S#{silent => all, lagging => #{}}),
    S1 = (reconnect(S0#{groups := all}, S))#{faults := false},
    lists:foldl(fun(Nd, Acc) ->
                        case maps:get(Nd, Reps) of
                            {down, _, _} -> act({restart, Nd}, Acc);
                            _ -> Acc
                        end
                end, S1, Nodes).

act(A, S = #{driver := D}) -> D:action(A, S);
act(A, S) -> action(A, S).

%% @doc Run tick by tick after the work phase (which ended at `Dur') until the replicas are
%% quiescent or for at most 60 simulated s; records `converged_ms' and `quiesced_ms'.
-spec quiesce(non_neg_integer(), map()) -> map().
quiesce(Dur, S) -> quiesce(Dur, Dur + ?TICK, S).

quiesce(Dur, T, S) ->
    S1 = run_until(T, S),
    _ = trace_quiesce(T - Dur, S1),
    S2 = case {maps:is_key(converged_ms, maps:get(stats, S1)), check(converged, S1)} of
             {false, true} -> (bump(converged_ms, T - Dur, S1));
             _ -> S1
         end,
    case check(quiescent, S2) orelse T - Dur >= ?QUIESCE_CAP of
        true -> S2#{quiesced_ms => T - Dur};
        false -> quiesce(Dur, T + ?TICK, S2)
    end.

%% With option `trace_quiesce': every tick after the work phase, per replica, the operations
%% it delivered, buffered and logged, and how many it has still to apply (`service').
trace_quiesce(_, #{driver := _}) -> ok;
trace_quiesce(Ms, #{cfg := #{trace_quiesce := true}, nodes := Nodes, reps := Reps}) ->
    Row = [case maps:get(Nd, Reps) of
               {down, _, _} -> {Nd, down};
               R -> B = hm_ec_table:tcsb(R),
                    {Nd, lists:sum(maps:values(hm_tcsb:delivered(B))), hm_tcsb:pending(B),
                     hm_tcsb:log_size(B)}
           end || Nd <- Nodes],
    io:format("+~p ms ~w~n", [Ms, Row]),
    Up = [{Nd, R} || Nd <- Nodes, R <- [maps:get(Nd, Reps)], element(1, R) =/= down],
    Most = lists:foldl(fun({_, R}, A) -> hm_vv:join(A, hm_tcsb:delivered(hm_ec_table:tcsb(R))) end,
                       #{}, Up),
    [begin
         D = hm_tcsb:delivered(hm_ec_table:tcsb(R)),
         io:format("   ~p lacks ~w~n   from ~w~n",
                   [Nd, [{O, hm_vv:get(O, D), C} || {O, C} <- maps:to_list(Most), hm_vv:get(O, D) < C],
                    [begin
                         X = hm_tcsb:retransmission(hm_ec_table:tcsb(R2)),
                         {M, maps:get(tick, X) - maps:get(Nd, maps:get(acked, X), -99),
                          case maps:get(Nd, maps:get(flight, X), none) of
                              {Cut, Rounds, W} -> {maps:to_list(Cut), [At || {At, _} <- Rounds], W};
                              none -> none
                          end,
                          maps:get(Nd, maps:get(reported, X), none)}
                     end || {M, R2} <- Up, M =/= Nd]])
     end || {Nd, R} <- Up, not hm_vv:leq(Most, hm_tcsb:delivered(hm_ec_table:tcsb(R)))],
    ok;
trace_quiesce(_, _) -> ok.

check(F, S = #{driver := D}) -> D:F(S);
check(F, S = #{cfg := #{crdt := _}}) -> hm_sim_crdt_table:F(S);
check(converged, S) -> converged(S);
check(quiescent, S) -> quiescent(S).

reps(#{reps := Reps, nodes := Nodes}) -> [maps:get(N, Reps) || N <- Nodes].

converged(S) ->
    Rs = reps(S),
    lists:all(fun(R) -> hm_ec_table:status(R) =:= ready end, Rs) andalso
        length(lists:usort([hm_tcsb:delivered(hm_ec_table:tcsb(R)) || R <- Rs])) =:= 1
        andalso length(lists:usort([rows(R) || R <- Rs])) =:= 1.

quiescent(S) ->
    %% no writer waits for a held answer with operations still to make
    maps:get(writer_waits, S, #{}) =:= #{} andalso converged(S) andalso
        lists:all(fun(R) ->
                          B = hm_ec_table:tcsb(R),
                          hm_tcsb:log_size(B) =:= 0 andalso hm_tcsb:pending(B) =:= 0
                              andalso hm_ec_table:clears(R) =:= []
                              andalso hm_ec_table:held(R) =:= 0
                              andalso lists:all(fun(KS) -> hm_ec_key:timestamps(KS) =:= 0 end,
                                                maps:values(meta(R)))
                  end, reps(S)).

finish(S0 = #{cfg := Cfg, nodes := Nodes, ops := Ops, stats := St}) ->
    Rs = reps(S0),
    %% 1. convergence
    Rows = [rows(R) || R <- Rs],
    Hashes = [erlang:phash2(lists:sort(maps:to_list(Rw))) || Rw <- Rows],
    S1 = case length(lists:usort(Rows)) of
             1 -> S0;
             _ -> fail({diverged, lists:zip(Nodes, Hashes),
                        lists:usort(lists:zip(Hashes, Rows))}, S0)
         end,
    %% 2. no lost acknowledged write
    Final = hm_tcsb:delivered(hm_ec_table:tcsb(hd(Rs))),
    View = hd(Rows),
    %% the operations that may supersede a write: those on its key, and clears
    ByKey = maps:groups_from_list(fun(#{key := K}) -> K end, maps:values(Ops)),
    S2 = maps:fold(fun(_, I, Acc) -> check_acked(I, ByKey, Final, View, Cfg, Acc) end, S1, Ops),
    %% 5. metadata bound
    S3 = lists:foldl(
           fun({Nd, R}, Acc) ->
                   B = hm_ec_table:tcsb(R),
                   Big = [{K, KS} || {K, KS} <- maps:to_list(meta(R)),
                                     hm_ec_key:timestamps(KS) > 0],
                   Acc1 = case Big of
                              [] -> Acc;
                              _ -> fail({metadata_bound, Nd, Big}, Acc)
                          end,
                   Acc2 = case {hm_tcsb:log_size(B), hm_tcsb:pending(B)} of
                              {0, 0} -> Acc1;
                              LP -> fail({log_not_empty, Nd, LP}, Acc1)
                          end,
                   %% every write was answered (flow control holds answers back a while)
                   case hm_ec_table:held(R) of
                       0 -> Acc2;
                       H -> fail({answers_held, Nd, H}, Acc2)
                   end
           end, S2, lists:zip(Nodes, Rs)),
    MaxTs = lists:max([0 | [hm_ec_key:timestamps(KS) || R <- Rs,
                                                         KS <- maps:values(meta(R))]]),
    Lost = length([x || #{lost := true} <- maps:values(Ops)]),
    #{failures := Fs} = S3,
    #{ok => Fs =:= [], failures => Fs,
      stats => St#{quiesced_ms => maps:get(quiesced_ms, S3), max_timestamps => MaxTs,
                   lost_with_ram_crash => Lost, hash => hd(Hashes),
                   duplicates => lists:sum([hm_ec_table:duplicates(R) || R <- Rs]),
                   samples => maps:get(samples, S3),
                   probe => maps:get(probe_acc, S3, none)}}.

check_acked(#{lost := true}, _, _, _, _, S) -> S;
check_acked(I = #{dot := Dot}, ByKey, Final, View, Cfg, S) ->
    case hm_vv:contains(Dot, Final) of
        false -> fail({acknowledged_op_lost, maps:without([msg], I)}, S);
        true -> check_visible(I, maps:get(maps:get(key, I), ByKey, [])
                              ++ maps:get(all, ByKey, []), Final, View, Cfg, S)
    end.

check_visible(W = #{op := {write, Rec, _}, key := K, dot := WD, ts := WTs}, Ops, Final, View,
              #{type := Type, policy := Policy}, S) ->
    Supersedes =
        fun(#{dot := OD, ts := OTs, key := OK, op := Op}) ->
                After = hm_vv:contains(WD, OTs) andalso OD =/= WD,
                Conc = not After andalso not hm_vv:contains(OD, WTs),
                OnKey = OK =:= K orelse Op =:= clear,
                Kills = case Op of
                            {write, _, _} -> After;
                            delete -> After orelse (Conc andalso Type =:= prwset);
                            clear -> After orelse (Conc andalso Type =:= prwset);
                            {delete_object, R} ->
                                R =:= Rec andalso (After orelse (Conc andalso Type =:= prwset))
                        end,
                hm_vv:contains(OD, Final) andalso OnKey andalso Kills
        end,
    case lists:any(Supersedes, Ops) of
        true -> S;
        false ->
            Shown = maps:get(K, View, []),
            Visible = case Policy of
                          siblings -> lists:member(Rec, Shown);
                          _ -> Shown =/= []
                      end,
            case Visible of
                true -> S;
                false -> fail({acknowledged_write_invisible, maps:without([msg, holders], W),
                               {shown, Shown}}, S)
            end
    end;
check_visible(_, _, _, _, _, S) -> S.

%% metadata sample of one replica at a tick (for the scale report): bytes of the hm_meta
%% rows over the keys the replica knows, and of the delivered vector
sample(n1, R, S = #{samples := Sm, faults := true}) ->
    Meta = meta(R),
    Keys = lists:usort(maps:keys(Meta) ++ maps:keys(rows(R))),
    Bytes = lists:sum([byte_size(term_to_binary({hm_meta, K, KS})) || {K, KS} <- maps:to_list(Meta)]),
    VV = byte_size(term_to_binary(hm_tcsb:delivered(hm_ec_table:tcsb(R)))),
    S#{samples := [{Bytes, max(1, length(Keys)), VV} | Sm]};
sample(_, _, S) -> S.

%%% ================================================================ minimisation

%% @doc Drop trace actions one at a time (a fault with its heal or restart), keeping a drop when the run still
%% fails; at most `Budget' runs.
-spec minimise(cfg(), [action()], pos_integer()) -> [action()].
minimise(Cfg, Trace, Budget) -> minimise_with(fun(T) -> run(Cfg, T) end, Trace, Budget).

%% @doc {@link minimise/3} for any runner of traces (a `fun(Trace) -> result()').
-spec minimise_with(fun(([action()]) -> #{ok := boolean(), _ => _}), [action()],
                    pos_integer()) -> [action()].
minimise_with(Run, Trace, Budget) -> min_loop(Run, Trace, 1, Budget).

min_loop(_, Trace, I, B) when I > length(Trace); B =< 0 -> Trace;
min_loop(Run, Trace, I, B) ->
    {Pre, [Act | Post]} = lists:split(I - 1, Trace),
    Smaller = Pre ++ (Post -- partner(Act, Post)),
    case maps:get(ok, Run(Smaller)) of
        false -> min_loop(Run, Smaller, I, B - 1);
        true -> min_loop(Run, Trace, I + 1, B - 1)
    end.

%% a fault's closing action goes with it
partner({_, {crash, N}}, Post) ->
    case [A || A = {_, {restart, M}} <- Post, M =:= N] of [A | _] -> [A]; [] -> [] end;
partner({_, {mnesia_stop, N}}, Post) ->
    case [A || A = {_, {mnesia_start, M}} <- Post, M =:= N] of [A | _] -> [A]; [] -> [] end;
partner({_, {Cut, _, _}}, Post) when Cut =:= partition; Cut =:= silent ->
    case [A || A = {_, H} <- Post, H =:= heal orelse is_tuple(H) andalso element(1, H) =:= heal]
    of
        [A | _] -> [A];
        [] -> []
    end;
partner(_, _) -> [].

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
              "writes lost with a crash~n",
              [P + F, Kind, maps:get(ops, Tot, 0), maps:get(passed_on, Tot, 0),
               maps:get(hints_kept, Tot, 0), maps:get(copies_removed, Tot, 0),
               maps:get(msgs, Tot, 0), maps:get(session_pairs, Tot, 0),
               maps:get(refused_behind, Tot, 0), maps:get(crashes, Tot, 0),
               maps:get(crashes_holding_hints, Tot, 0), maps:get(hints_lost_with_crash, Tot, 0),
               maps:get(writes_lost_with_crash, Tot, 0)]),
    io:format("~s: ~p passed, ~p failed~n", [Line, P, F]),
    {P, F}.

%% @doc Add a run's integer statistics to the totals (max for `max_timestamps').
-spec totals(map(), map()) -> map().
totals(St, Tot) ->
    maps:fold(fun(quiesced_ms, V, Acc) ->
                      Acc#{quiesced_ms => maps:get(quiesced_ms, Acc, 0) + V,
                           max_quiesced_ms => max(V, maps:get(max_quiesced_ms, Acc, 0))};
                 (K, V, Acc) when is_integer(V), K =/= hash, K =/= max_timestamps ->
                      Acc#{K => maps:get(K, Acc, 0) + V};
                 (max_timestamps, V, Acc) -> Acc#{max_timestamps => max(V, maps:get(max_timestamps, Acc, 0))};
                 (_, _, Acc) -> Acc
              end, Tot, St).

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
              [P + MP + LP + SP + QP + WP + CP + TP + FP + XP + DP,
               F + MF + LF + SF + QF + WF + CF + TF + FF + XF + DF]),
    halt(case F + MF + LF + SF + QF + WF + CF + TF + FF + XF + DF of 0 -> 0; _ -> 1 end);
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
    report(File, [10, 50, 100, 200]),
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

%% @doc A failing schedule: minimise its trace with `Run', write `Saved(Minimised)' to `File'
%% (what `make sim SEED=S TRACE=File' replays) and print both runs' failures.
-spec print_minimised(string(), integer(), iodata(), fun(([action()]) -> result()), [action()],
                      [term()], string(), fun(([action()]) -> term())) -> ok.
print_minimised(What, Seed, Desc, Run, Trace, Fs, File, Saved) ->
    Min = minimise_with(Run, Trace, 150),
    ok = filelib:ensure_dir(File),
    ok = file:write_file(File, io_lib:format("~p.~n", [Saved(Min)])),
    #{failures := MinFs} = Run(Min),
    io:format("FAILED ~s ~p (~s): ~P~n"
              "  minimised trace (~p of ~p actions, replay: make sim SEED=~p TRACE=~s):~n"
              "  ~p~n  failures of the minimised trace: ~P~n",
              [What, Seed, Desc, Fs, 40, length(Min), length(Trace), Seed, File, Min,
               MinFs, 60]).

%% The mean simulated time from the end of the work phase to convergence.
converge_line(Tot, Runs) ->
    io_lib:format("~.1f simulated s on average", [maps:get(converged_ms, Tot, 0) / max(1, Runs) / 1000]).

%% @doc The faults of campaign totals, as one line.
-spec fault_line(map()) -> iolist().
fault_line(T) ->
    Parts = [{"partitions", lists:sum([V || {{partition, _}, V} <- maps:to_list(T)])},
             {"crashes", maps:get(crashes, T, 0)}, {"restarts", maps:get(restarts, T, 0)},
             {"dropped", maps:get(dropped, T, 0)}, {"duplicated", maps:get(duplicated, T, 0)},
             {"cut", maps:get(dropped_cut, T, 0)}, {"snapshots", maps:get(installs, T, 0)},
             {"ops lost with a ram crash", maps:get(lost_with_ram_crash, T, 0)}],
    string:join([io_lib:format("~s ~p", [K, V]) || {K, V} <- Parts], ", ").

%% @doc Scale report: per replica count, one schedule: 200 operations over 8 keys in 2 s with a
%% halves partition for the second half, then heal. The table replaces what lies between the
%% `<!-- scale:begin -->' and `<!-- scale:end -->' markers of `File' (the rest of the file is
%% written by hand), or makes up the whole file when it has no markers.
-spec report(file:filename(), [pos_integer()]) -> ok.
report(File, Ns) ->
    Rows = [scale(N) || N <- Ns],
    Table = ["<!-- scale:begin -->\n"
             "Produced by `make sim-report` (hm_sim:report/2, ", otp(), "): for each replica "
             "count, one schedule (seed 1, pawset/lww, ram copies, 200 client operations spread "
             "over 2 s of simulated time on 8 keys from random replicas, network delay 1-50 ms, "
             "no random loss, a halves partition from 1 s until the end of the work phase at "
             "2 s, then heal). Ticks every 250 ms of simulated time.\n\n"
             "| replicas | ops | messages/op (all) | op messages/op | ack messages/op | "
             "meta bytes/key (mean) | meta bytes/key (max) | delivered-vector bytes | "
             "converge after heal (sim ms) | quiescent after heal (sim ms) | checks | run time (s) |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|---|\n", Rows, notes(),
             "<!-- scale:end -->\n"],
    Text = case file:read_file(File) of
               {ok, Old} ->
                   case binary:split(Old, <<"<!-- scale:begin -->\n">>) of
                       [Pre, Rest] ->
                           [_, Post] = binary:split(Rest, <<"<!-- scale:end -->\n">>),
                           [Pre, Table, Post];
                       _ -> ["# Simulator report\n\n", Table]
                   end;
               _ -> ["# Simulator report\n\n", Table]
           end,
    ok = file:write_file(File, Text),
    io:format("~s", [Table]).

otp() -> "OTP " ++ erlang:system_info(otp_release).

scale(N) ->
    Keys = [list_to_atom("k" ++ integer_to_list(I)) || I <- lists:seq(1, 8)],
    Opts = #{n => N, type => pawset, policy => lww, storage => ram, drop => 0.0, dup => 0.0,
             delay => 50, duration => 2000, ops => 200, faults => 0, keys => Keys},
    {Cfg, Trace0} = gen(1, Opts),
    Nodes = nodes_of(N),
    {A, B} = lists:split(N div 2, Nodes),
    Trace = lists:keysort(1, [{1000, {partition, halves, [A, B]}} | Trace0]),
    T0 = erlang:monotonic_time(millisecond),
    #{ok := Ok, stats := St, failures := Fs} = run(Cfg, Trace),
    Secs = (erlang:monotonic_time(millisecond) - T0) / 1000,
    Ops = max(1, maps:get(ops, St, 0)),
    Samples = maps:get(samples, St, []),
    PerKey = [Bt / Ks || {Bt, Ks, _} <- Samples],
    Mean = case PerKey of [] -> 0; _ -> lists:sum(PerKey) / length(PerKey) end,
    Max = lists:max([0 | PerKey]),
    VV = lists:max([0 | [V || {_, _, V} <- Samples]]),
    io_lib:format("| ~p | ~p | ~.1f | ~.1f | ~.1f | ~.1f | ~.1f | ~p | ~p | ~p | ~s | ~.1f |~n",
                  [N, Ops, maps:get(msgs, St, 0) / Ops, maps:get({msg, op}, St, 0) / Ops,
                   maps:get({msg, ack}, St, 0) / Ops, Mean, Max, VV,
                   maps:get(converged_ms, St, -1), maps:get(quiesced_ms, St, -1),
                   case Ok of true -> "pass"; false -> io_lib:format("FAIL ~0P", [Fs, 8]) end,
                   Secs]).

notes() ->
    "\nColumns: messages are every send (op, ack, snapshot request) from the start to "
    "quiescence, divided by client operations. Op messages include retransmissions: every "
    "replica logs every delivered operation until it is stable and, at each tick, resends "
    "(resend_due/2) to every reachable member the ones it has not reported delivered, in "
    "causal order, within a window per member. Acks: every replica to every reachable member every "
    "tick (N^2 per tick). Meta bytes/key: `term_to_binary({hm_meta, Key, KeyState})` summed "
    "over replica n1's metadata rows, divided by the keys it holds, sampled at each of its "
    "ticks during the work phase. The delivered vector (one entry per replica incarnation) "
    "is what every ack and every operation's timestamp carries. Converge: simulated time "
    "from the heal until every replica shows the same rows and delivered vector; quiescent: "
    "until, in addition, logs are empty and no key keeps a timestamp (checked every 250 ms, "
    "so both are multiples of 250).\n".
