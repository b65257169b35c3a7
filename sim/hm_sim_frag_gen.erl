%% @doc The schedules of the partitioned-table family ({@link hm_sim_frag}): a seed's
%% configuration (nodes, fragments, copies per fragment, network fault rates, a
%% CRDT type and flavor with option `crdt') and its trace of timed actions: client
%% operations from any node, the shared fault model's partitions, crashes and restarts, the
%% pool changes (or a node that dies for good and leaves the pool while down), and the crash
%% of a node holding hints.
-module(hm_sim_frag_gen).

-export([gen/2]).

-define(KEYS, [k1, k2, k3, k4, k5, k6]).
-define(VALUES, [a, b, c]).

%%% ================================================================ schedules

%% @doc The configuration and trace of seed `Seed'.
-spec gen(integer(), map()) -> {map(), [hm_sim:action()]}.
gen(Seed, Opts) ->
    R0 = rand:seed_s(exsss, {Seed, 16#f4a9, 16#51e}),
    {[N, F, Copies, TI, Drop, Dup, Delay, NOps, NFaults, Back], R1} =
        hm_sim:draws([{int, 4, 6}, {int, 3, 8}, {int, 2, 3}, {int, 1, 2}, {int, 0, 10},
                      {int, 0, 10}, {int, 1, 100}, {int, 30, 80}, {int, 0, 3}, {int, 0, 1}],
                     R0),
    Cfg = crdt_spec(Seed, maps:merge(#{kind => frag, n => N, fragments => F, copies => Copies,
                                       type => element(TI, {pawset, prwset}),
                                       policy => term_order, storage => ram,
                                       drop => Drop / 100, dup => Dup / 100, delay => Delay,
                                       duration => 5000, seed => Seed, skew => #{}}, Opts)),
    Nodes = hm_sim:nodes_of(maps:get(n, Cfg)),
    Dur = maps:get(duration, Cfg),
    {Ops0, R2} = gen_ops(NOps, Nodes, Dur, R1),
    Ops = crdt_ops(Seed, Cfg, Ops0),
    {Faults0, R3} = hm_sim:gen_faults(NFaults, Nodes, Dur, R2),
    Crashes = crashes(Cfg),
    Faults = [A || A = {_, Fa} <- Faults0, Crashes orelse (element(1, Fa) =/= crash andalso
                                                           element(1, Fa) =/= restart)],
    {Leaver, R4} = hm_sim:pick(Nodes, R3),
    {T1, R5} = rand:uniform_s(Dur div 2, R4),
    {T2, R6} = rand:uniform_s(Dur div 2, R5),
    Moves = case dead_node(Seed, Cfg) of
                %% the node dies for good, and leaves the pool while it is down
                true -> [{T1, {die, Leaver}}, {T1 + max(1, T2 div 2), {pool, del, Leaver}}];
                false -> [{T1, {pool, del, Leaver}}] ++
                             [{T1 + T2, {pool, add, Leaver}} || Back =:= 1]
            end,
    %% a node holding hints crashes (the first that holds some then), in 3 seeds of 4
    {[TC, LC, CI], _} = hm_sim:draws([{int, 1, Dur}, {int, 1, Dur div 2}, {int, 1, 4}], R6),
    Hinted = [A || Crashes, CI =< 3,
                   A <- [{TC, crash_hinted}, {min(Dur, TC + LC), restart_all}]],
    {Cfg, lists:keysort(1, Ops ++ Faults ++ Moves ++ Hinted)}.

%% Crashes (of any node, and of a node holding hints) on a table of records, unless the
%% option `crash => false' turns them off; a CRDT table's schedules have none.
crashes(#{crdt := _}) -> false;
crashes(Cfg) -> maps:get(crash, Cfg, true).

%% In 1 seed of 4 of a table of records with crashes, the node that would leave the pool
%% dies for good instead (it never restarts), and is removed from the pool while it is down,
%% as `hypermnesia:change_table_frag(Tab, {del_node, Node})' removes a node that is down:
%% the survivors re-create its copies elsewhere. This replaces the seed's other pool changes.
dead_node(Seed, Cfg) -> crashes(Cfg) andalso Seed rem 4 =:= 0.

%% `crdt => any': the seed picks the type and flavor, and an epoch of 50 to 500 ms.
crdt_spec(Seed, Cfg = #{crdt := any}) ->
    Combos = hm_sim_crdt_table:combos(),
    Cfg#{crdt := lists:nth(1 + Seed rem length(Combos), Combos),
         epoch => maps:get(epoch, Cfg, 50 + (Seed * 37) rem 451)};
crdt_spec(_, Cfg) -> Cfg.

%% A CRDT table (option `crdt => {Type, Flavor}', and `epoch'): the same times, nodes and
%% keys, with updates of the type drawn from a random stream of their own.
crdt_ops(Seed, #{crdt := {Type, _}}, Ops) ->
    {Ups, _} = lists:mapfoldl(fun({T, {op, Nd, Key, _}}, R) ->
                                      {Op, R1} = hm_sim_crdt_table:gen_op(Type, R),
                                      {{T, {op, Nd, Key, {update, Op}}}, R1}
                              end, rand:seed_s(exsss, {Seed, 16#c7f4, 16#9}), Ops),
    Ups;
crdt_ops(_, _, Ops) -> Ops.

gen_ops(0, _, _, R) -> {[], R};
gen_ops(K, Nodes, Dur, R) ->
    {[T, NI, KI, VI, OI], R1} =
        hm_sim:draws([{int, 1, Dur}, {int, 1, length(Nodes)}, {int, 1, length(?KEYS)},
                      {int, 1, length(?VALUES)}, {int, 1, 10}], R),
    V = lists:nth(VI, ?VALUES),
    Op = if OI =< 7 -> {write, V};
            OI =< 9 -> delete;
            true -> {delete_object, V}
         end,
    {Rest, R2} = gen_ops(K - 1, Nodes, Dur, R1),
    {[{T, {op, lists:nth(NI, Nodes), lists:nth(KI, ?KEYS), Op}} | Rest], R2}.
