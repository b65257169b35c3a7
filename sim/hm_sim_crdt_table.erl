%% @doc CRDT tables in the deterministic simulator: the schedules, the bookkeeping of client
%% updates and the checkers of {@link hm_sim}'s CRDT-table family (`gen(Seed, #{crdt =>
%% true})'). Every copy is the runtime's own per-table core ({@link hm_ec_table} with its
%% per-key core {@link hm_ec_crdt}) on a map store, run by {@link hm_sim}'s table path with
%% its network, faults, churn and checkers 3 and 4: what propagates a CRDT table's updates in
%% the simulator is what propagates them at run time (the tagged causal broadcast
%% {@link hm_tcsb}, the broadcast epochs of the lattice flavors, state transfer), never a
%% copy of it (the ChiaVe paper, *ChiaVe: A Flexible CRDT-Based Key-Value Store*, §3–4;
%% the Hypermnesia paper, *Hypermnesia: Eventual Consistency in Mnesia*, §4.3–4.8).
%%
%% == Schedules ==
%% 3–5 copies of a CRDT table of a type (`gcounter', `pncounter', `awset', `rwset',
%% `lwwreg', `mvreg', `ewflag', `map') in a flavor (`op', `state', `delta'), a broadcast epoch
%% of 20–300 ms, ram, disc or mixed storage, loss, duplication and reordering, client updates
%% on two keys at random copies (the operations of {@link hm_sim_crdt}'s workloads; a map
%% updates a counter, a set and a flag field and removes fields), partitions of the four
%% shapes, crashes and restarts, and copies added and removed (churn).
%%
%% Partitioned CRDT tables (fragments on a ring, updates from any node passed on to a holder
%% or kept as hints, nodes leaving and rejoining the pool) run in {@link hm_sim_frag} with
%% option `crdt', with the checkers below per fragment.
%%
%% == What is acknowledged ==
%% An update is acknowledged when the copy it was made at applied it (`async_ec' and
%% `update/3' return then). It is lost only when a copy goes down (a ram crash, a disc copy
%% with no durable broadcast state, a copy removed) and no other copy that is up and caught
%% up, or down with a durable state, holds it: an update of a lattice flavor still in the
%% epoch's unsent batch of a ram copy that crashes is lost, which `async_ec' permits.
%%
%% == Checkers ==
%% <ol>
%% <li>convergence: every copy shows the same value for every key (and, in the lattice
%% flavors, the same delivered vector per key);</li>
%% <li>no lost acknowledged update: every acknowledged update is delivered by every copy at
%% the end, and each key's value is the type's declarative specification (test/hm_spec_TYPE)
%% over the updates delivered and their happened-before relation; a counter's value is the
%% sum of the acknowledged updates plus some subset of the lost ones (Maelstrom's
%% bound);</li>
%% <li>metadata bound after quiescence: no key keeps timestamps (op), no buffered event, no
%% unsent update, no key whose row lacks updates (write-behind), an empty broadcast
%% log.</li>
%% </ol>
-module(hm_sim_crdt_table).

-export([gen/2, replica_opts/1, update/5, mark_lost/1, converged/1, quiescent/1, finish/1,
         combos/0]).
%% what the partitioned-table family (hm_sim_frag) shares
-export([gen_op/2, client_op/3, recorded/5, holds/3, view/1, leftovers/1, key_check/6]).

-define(KEYS, [k1, k2]).
-define(TYPES, [gcounter, pncounter, awset, rwset, lwwreg, mvreg, ewflag, map]).

%%% ================================================================ schedules

%% @doc Every type x flavor of the family.
-spec combos() -> [{hm_crdt:type(), hm_crdt:flavor()}].
combos() -> [{T, F} || T <- ?TYPES, F <- hm_crdt:flavors()].

%% @doc The configuration and trace of CRDT-table seed `Seed'. Options override
%% configuration fields (`n', `crdt' as `{Type, Flavor}', `epoch', `storage', `drop', `dup',
%% `delay', `duration', `ops', `faults', `crash', `membership', `keys', and `workload':
%% `mixed' (the default) or `adds' (a set type: every update adds a new element);
%% `crdt_spec' is `crdt').
-spec gen(integer(), map()) -> {hm_sim:cfg(), [hm_sim:action()]}.
gen(Seed, Opts0) ->
    Opts = case maps:take(crdt_spec, Opts0) of
               {Spec, O} -> O#{crdt => Spec};
               error -> Opts0
           end,
    R0 = rand:seed_s(exsss, {Seed, 16#c7ab, 16#1e}),
    {[N, CI, Epoch, SI, Drop, Dup, Delay, NOps, NFaults, Join, Leave, TJ, TL, LI], R1} =
        hm_sim:draws([{int, 3, 5}, {int, 1, length(combos())}, {int, 20, 300}, {int, 1, 3},
                      {int, 0, 15}, {int, 0, 10}, {int, 1, 150}, {int, 15, 60}, {int, 0, 4},
                      {int, 0, 1}, {int, 0, 1}, {int, 1, 4000}, {int, 1, 4000}, {int, 1, 4}],
                     R0),
    Cfg0 = #{n => N, type => pawset, policy => term_order, crdt => lists:nth(CI, combos()),
             epoch => Epoch, storage => element(SI, {ram, disc, mixed}), drop => Drop / 100,
             dup => Dup / 100, delay => Delay, duration => 4000, seed => Seed, ops => NOps,
             faults => NFaults, keys => ?KEYS, membership => true},
    Cfg1 = maps:merge(Cfg0, Opts),
    #{n := N1, duration := Dur, ops := Ops, faults := Fs, crdt := {Type, _}} = Cfg1,
    Nodes = hm_sim:nodes_of(N1),
    Cfg = maps:without([ops, faults, membership],
                       Cfg1#{skew => maps:from_list([{Nd, 0} || Nd <- Nodes])}),
    Gen = case maps:get(workload, Cfg1, mixed) of
              mixed -> Type;
              adds -> adds                     % a set growing by a new element per update
          end,
    {OpActs0, R2} = gen_ops(Ops, Gen, Nodes, Dur, maps:get(keys, Cfg1), R1),
    OpActs = case Gen of
                 adds -> [{T, {op, Nd, K, {update, {add, I}}}}
                          || {I, {T, {op, Nd, K, _}}}
                                 <- lists:enumerate(lists:keysort(1, OpActs0))];
                 _ -> OpActs0
             end,
    {FaultActs0, _} = hm_sim:gen_faults(Fs, Nodes, Dur, R2),
    FaultActs = case maps:get(crash, Cfg, true) of
                    true -> FaultActs0;
                    false -> [A || A = {_, F} <- FaultActs0, element(1, F) =/= crash,
                                   element(1, F) =/= restart]
                end,
    %% churn: the last node's copy joins later, another one's is removed for good
    Joiner = lists:last(Nodes),
    Churn = case maps:get(membership, Cfg1) of
                true -> [{min(TJ, Dur - 1), {add, Joiner}} || Join =:= 1]
                            ++ [{min(TL, Dur - 1),
                                 {remove, lists:nth(1 + (LI - 1) rem (N1 - 1),
                                                    Nodes -- [Joiner])}} || Leave =:= 1];
                false -> []
            end,
    {Cfg, lists:keysort(1, OpActs ++ FaultActs ++ Churn)}.

gen_ops(0, _, _, _, _, R) -> {[], R};
gen_ops(K, Type, Nodes, Dur, Keys, R) ->
    {[T, NI, KI], R1} = hm_sim:draws([{int, 1, Dur}, {int, 1, length(Nodes)},
                                      {int, 1, length(Keys)}], R),
    {Op, R2} = gen_op(Type, R1),
    {Rest, R3} = gen_ops(K - 1, Type, Nodes, Dur, Keys, R2),
    {[{T, {op, lists:nth(NI, Nodes), lists:nth(KI, Keys), {update, Op}}} | Rest], R3}.

%% @doc A random update of a type (`adds': a placeholder numbered later).
-spec gen_op(hm_crdt:type() | adds, rand:state()) -> {term(), rand:state()}.
gen_op(adds, R) -> {{add, 0}, R};
gen_op(map, R) ->
    hm_sim:pick([{update, hits, gcounter, increment}, {update, hits, gcounter, {increment, 2}},
                 {update, tags, awset, {add, a}}, {update, tags, awset, {add, b}},
                 {update, tags, awset, {remove, a}}, {update, on, ewflag, enable},
                 {update, on, ewflag, disable}, {remove, tags}, {remove, hits}], R);
gen_op(Type, R) -> hm_sim_crdt:gen_op(Type, R).

%% @doc What {@link hm_ec_table:new/1} takes beside the table's options for a CRDT table
%% (none for a table of records).
-spec replica_opts(hm_sim:cfg()) -> map().
replica_opts(#{crdt := Spec, epoch := Ms}) -> #{crdt => Spec, epoch => Ms};
replica_opts(_) -> #{}.

%%% ================================================================ client updates

%% @doc A client update `Op' on `Key' at node `Nd', copy `R' ready: submitted as `update/3'
%% does (an lwwreg assign takes the node's simulated clock, coarse so that ties happen).
%% Returns the copy and effects after it, and the simulator state with the update recorded
%% as acknowledged (or counted as refused).
-spec update(node(), term(), term(), hm_ec_table:state(), map()) ->
          {hm_ec_table:state(), [hm_ec_table:effect()], map()}.
update(Nd, Key, Op0, R, S = #{now := Now, cfg := Cfg}) ->
    Op = client_op(Op0, Now, Cfg),
    {R1, Effs} = hm_ec_table:submit({Key, {update, Op}}, async, client,
                                    {Now * 1000, hm_sim_engine:reachable(Nd, S)}, R),
    case [Reply || {reply, client, Reply} <- Effs] of
        [ok] ->
            {Id, Info} = recorded(Key, Op, Effs, R1, Cfg),
            Us = maps:get(updates, S, #{}),
            {R1, Effs, hm_sim_engine:bump(ops, S#{updates => Us#{Id => Info}})};
        Other ->
            {R1, Effs, hm_sim_engine:fail({update_refused, Nd, Key, Op, Other}, S)}
    end.

%% @doc The update a client sends for a trace's operation at simulated time `Now': an
%% lwwreg assign takes the time, coarse (20 ms) so that ties happen.
-spec client_op(term(), non_neg_integer(), map()) -> term().
client_op({assign, V}, Now, #{crdt := {lwwreg, _}}) -> {assign, V, Now div 20};
client_op(Op, _, _) -> Op.

%% @doc An update the copy `R1' took (`Effs' its effects): its id `{Key, Dot}' and what the
%% checkers need of it (dot and vector timestamp: the broadcast's in the op flavor, the
%% key's CRDT's in the lattice flavors).
-spec recorded(term(), term(), [hm_ec_table:effect()], hm_ec_table:state(), map()) ->
          {{term(), hm_vv:dot()}, map()}.
recorded(Key, Op, Effs, R1, #{crdt := {_, Flavor}}) ->
    Id = hm_tcsb:self(hm_ec_table:tcsb(R1)),
    {Dot, Ts} = case Flavor of
                    op ->
                        [{O, T, _} | _] = [M || {event, {applied, M}} <- Effs],
                        {{O, maps:get(O, T)}, T};
                    _ ->
                        Seen = hm_crdt:delivered(crdt(Key, R1)),
                        {{Id, hm_vv:get(Id, Seen)}, Seen}
                end,
    {{Key, Dot}, #{key => Key, dot => Dot, ts => Ts, op => Op, origin => Id, lost => false}}.

%% The CRDT a copy holds for a key (a new one when it holds none).
crdt(Key, R) ->
    case maps:get(Key, rows(R), []) of
        [{_, _, C}] -> C;
        [] -> hm_ec_crdt:new(spec(R))
    end.

spec(R) -> maps:get(crdt, hm_ec_table:info([], R)).

%% What reads show on the copy, per key (a CRDT table's updates its rows lack included).
rows(R) -> maps:groups_from_list(fun(Rec) -> element(2, Rec) end, hm_ec_table:rows(R)).

%% @doc Whether the copy (or what a crash left of it) holds update `{Key, Dot}': it has
%% delivered it (op: the broadcast delivered it; lattice: the key's CRDT has it).
-spec holds({term(), hm_vv:dot()}, hm_crdt:flavor(), hm_ec_table:state()) -> boolean().
holds({_Key, Dot}, op, R) -> hm_vv:contains(Dot, hm_tcsb:delivered(hm_ec_table:tcsb(R)));
holds({Key, Dot}, _, R) ->
    case maps:get(Key, rows(R), []) of
        [{_, _, C}] -> hm_vv:contains(Dot, hm_crdt:delivered(C));
        [] -> false
    end.

%% @doc A copy went down or away (a crash, Mnesia stopping under it, a copy removed; the simulator
%% state shows it so): every acknowledged update no copy holds any more is lost.
-spec mark_lost(map()) -> map().
mark_lost(S = #{cfg := Cfg}) when not is_map_key(crdt, Cfg) -> S;
mark_lost(S = #{cfg := #{crdt := {_, Flavor}}, nodes := Nodes, reps := Reps}) ->
    Holders = [R || M <- Nodes, R <- holder(maps:get(M, Reps))],
    Us = maps:map(fun(_, I = #{lost := true}) -> I;
                     (K, I) -> I#{lost := not lists:any(fun(R) -> holds(K, Flavor, R) end,
                                                        Holders)}
                  end, maps:get(updates, S, #{})),
    S#{updates => Us}.

%% A copy that holds what it delivered: up and caught up, or down with a durable state
%% (rebuilt from that state to be asked).
holder({down, D, true}) ->
    {R, _} = hm_ec_table:new(#{tab => sim, type => pawset, policy => term_order,
                               record => {r, 3}, cookie => sim, node => nonode,
                               incarnation => 0, members => [], store => D}),
    [R];
holder({down, _, false}) -> [];
holder(out) -> [];
holder(R) -> [R || hm_ec_table:status(R) =:= ready].

%%% ================================================================ quiescence and checks

%% @doc What a copy shows, per key: its value and (lattice flavors) its delivered vector.
-spec view(hm_ec_table:state()) -> #{term() => term()}.
view(R) ->
    maps:map(fun(_, [{_, _, C}]) ->
                     case hm_crdt:flavor(C) of
                         op -> hm_crdt:value(C);
                         _ -> {hm_crdt:value(C), hm_crdt:delivered(C)}
                     end
             end, rows(R)).

%% @doc Every copy is ready and shows the same values, having delivered the same updates.
-spec converged(map()) -> boolean().
converged(S) ->
    hm_sim_engine:copies_converged(hm_sim_engine:reps(S), fun view/1).

%% @doc Converged, and no metadata left that checker 3 looks at.
-spec quiescent(map()) -> boolean().
quiescent(S) ->
    converged(S) andalso lists:all(fun(R) -> leftovers(R) =:= [] end, hm_sim_engine:reps(S)).

%% @doc What a quiescent copy must no longer hold (`[]': nothing).
-spec leftovers(hm_ec_table:state()) -> list().
leftovers(R) ->
    B = hm_ec_table:tcsb(R),
    I = hm_ec_table:info([], R),
    [{K, N} || {K, N} <- [{log, hm_tcsb:log_size(B)}, {pending, hm_tcsb:pending(B)},
                          {unstable_keys, maps:get(unstable_keys, I)},
                          {unsent_updates, maps:get(unsent_updates, I)},
                          {unwritten_keys, maps:get(unwritten_keys, I)}], N =/= 0]
        ++ [{Key, metadata, hm_crdt:metadata(C)}
            || {Key, [{_, _, C}]} <- maps:to_list(rows(R)), hm_crdt:flavor(C) =:= op,
               hm_crdt:metadata(C) =/= 0]
        ++ [{Key, crdt_pending, hm_crdt:pending(C)}
            || {Key, [{_, _, C}]} <- maps:to_list(rows(R)), hm_crdt:pending(C) =/= 0].

%% @doc The checkers over the final copies; the family's result.
-spec finish(map()) -> hm_sim:result().
finish(S = #{cfg := #{crdt := {Type, Flavor}}, nodes := Nodes, stats := St}) ->
    Rs = hm_sim_engine:reps(S),
    Us = maps:get(updates, S, #{}),
    Views = [{Nd, view(R)} || {Nd, R} <- lists:zip(Nodes, Rs)],
    %% 1. convergence
    F1 = case lists:usort([V || {_, V} <- Views]) of
             [_] -> [];
             _ -> [{diverged, Views}]
         end,
    %% 2. every acknowledged update delivered everywhere; each key's value is the spec's
    F2a = [{acknowledged_update_lost, Nd, maps:without([ts], I)}
           || {Nd, R} <- lists:zip(Nodes, Rs), {K, I = #{lost := false}} <- maps:to_list(Us),
              not holds(K, Flavor, R)],
    R1 = hd(Rs),
    Keys = lists:usort([K || {K, _} <- maps:keys(Us)]),
    F2b = lists:append([key_check(Key, Type, Flavor, R1, Us, Views) || Key <- Keys]),
    %% 3. metadata bound
    F3 = [{metadata_left, Nd, L} || {Nd, R} <- lists:zip(Nodes, Rs), L <- [leftovers(R)],
                                    L =/= []],
    Fs = maps:get(failures, S) ++ [{maps:get(now, S), F} || F <- F1 ++ F2a ++ F2b ++ F3],
    Lost = length([x || #{lost := true} <- maps:values(Us)]),
    #{ok => Fs =:= [], failures => Fs,
      stats => St#{quiesced_ms => maps:get(quiesced_ms, S), lost_with_ram_crash => Lost}}.

%% @doc Checker 2 on one key: its value on every copy (`Views') against the type's spec over
%% the updates copy `R' delivered, and the counter bound.
-spec key_check(term(), hm_crdt:type(), hm_crdt:flavor(), hm_ec_table:state(), map(),
                [{node(), map()}]) -> [term()].
key_check(Key, Type, Flavor, R, Us, Views) ->
    In = [I || {{K, _} = Id, I} <- maps:to_list(Us), K =:= Key, holds(Id, Flavor, R)],
    History = [{Dot, O, Op, sets:from_list([D || #{dot := D} <- In, D =/= Dot,
                                                 hm_vv:contains(D, Ts)])}
               || #{dot := Dot, origin := O, op := Op, ts := Ts} <- In],
    Expected = (hm_spec:spec_module(Type)):spec(History),
    Shown = [{Nd, shown(maps:get(Key, V, absent), Type, Flavor)} || {Nd, V} <- Views],
    [{value_not_spec, Key, Nd, {shown, V}, {expected, Expected}}
     || {Nd, V} <- Shown, V =/= Expected]
        ++ case lists:member(Type, [gcounter, pncounter]) of
               true -> counter_bounds(Key, Type, Shown, Us);
               false -> []
           end.

shown(absent, Type, Flavor) -> hm_ec_crdt:empty_value({Type, Flavor});
shown({V, _}, _, Flavor) when Flavor =/= op -> V;
shown(V, _, _) -> V.

%% Maelstrom's pn-counter check: the acknowledged sum plus some subset of the lost updates
counter_bounds(Key, Type, Shown, Us) ->
    Amount = fun(Op) -> (hm_spec:spec_module(Type)):spec([{1, r, Op, sets:new()}]) end,
    Mine = [I || {{K, _}, I} <- maps:to_list(Us), K =:= Key],
    Acked = lists:sum([Amount(Op) || #{lost := false, op := Op} <- Mine]),
    LostAmounts = [Amount(Op) || #{lost := true, op := Op} <- Mine],
    Lo = Acked + lists:sum([A || A <- LostAmounts, A < 0]),
    Hi = Acked + lists:sum([A || A <- LostAmounts, A > 0]),
    [{counter_out_of_bounds, Key, Nd, V, {Lo, Hi}} || {Nd, V} <- Shown, V < Lo orelse V > Hi].
