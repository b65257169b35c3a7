%% @doc Deterministic simulator of partitioned EC tables: a table in `F' fragments on a
%% consistent-hash ring of a pool of nodes ({@link hm_ring}), each fragment held by the `N'
%% nodes of its preference list, each copy the runtime's own per-table core
%% ({@link hm_ec_table} on a map store), over the network, fault model and scheduler of
%% {@link hm_sim} (this module is its `driver').
%%
%% What runs here is what the runtime runs: the key's fragment ({@link hm_ec_frag:fragment/2}),
%% the order in which a node without a copy tries the holders
%% ({@link hm_ec_frag:holder_order/3}), the hints and their hand-off order
%% ({@link hm_ec_hints:pass_on/4}: a write with no reachable holder is kept, and older hints
%% of its fragment leave first), the placement and the moves of a pool change
%% ({@link hm_ring:placement/3}, {@link hm_ring:moves/2}), and the condition for removing a
%% copy that leaves ({@link hm_partition:removable/3}). A move adds the new copies (empty,
%% syncing: they catch up by state transfer), and removes a leaving copy only once the new
%% ones are ready and the others hold every operation it originated, as
%% `hypermnesia:change_table_frag/2' does; like Mnesia, it waits while the fragment's holders
%% cannot all talk.
%%
%% A schedule: 4–6 nodes, 3–8 fragments, 2–3 copies, client writes, deletes and
%% delete_objects on 6 keys from any node (a holder of the key's fragment or not), partitions
%% (halves, isolated, bridge, flapping), message loss, duplication and reordering, and one or
%% two pool changes (a node leaves the pool, and may come back). After the work phase: heal,
%% finish the moves, hand off the hints, run until quiescent, check.
%%
%% With option `crdt => {Type, Flavor}' (and `epoch'; `crdt => any': the seed picks them)
%% the table is a CRDT table: client
%% updates of the type instead of writes, the broadcast epoch's timers, and the checkers of
%% {@link hm_sim_crdt_table} per key on every holder of its fragment (the type's spec, the
%% counter bound) on top of these.
%%
%% Checkers: (1) every fragment's holders converge (same rows, same delivered vector); (2) no
%% lost acknowledged write: every write a node applied or passed on, and every hint it kept,
%% is delivered by every holder of its fragment at the end (so no hint is left); (3) the
%% placement is the ring's for the final pool; (4) every fragment has its `N' copies (or all
%% the pool) and no node outside the pool holds one.
-module(hm_sim_frag).

-export([gen/2, run/2, run_seed/2, check_seeds/2]).
-export([event/2, nodeup/3, action/2, converged/1, quiescent/1]).

-define(TICK, 250).
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
    Faults = [A || A = {_, Fa} <- Faults0, element(1, Fa) =/= crash,
                   element(1, Fa) =/= restart],
    {Leaver, R4} = hm_sim:pick(Nodes, R3),
    {T1, R5} = rand:uniform_s(Dur div 2, R4),
    {T2, _} = rand:uniform_s(Dur div 2, R5),
    Moves = [{T1, {pool, del, Leaver}}] ++ [{T1 + T2, {pool, add, Leaver}} || Back =:= 1],
    {Cfg, lists:keysort(1, Ops ++ Faults ++ Moves)}.

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

%%% ================================================================ running

-spec run_seed(integer(), map()) -> hm_sim:result().
run_seed(Seed, Opts) ->
    {Cfg, Trace} = gen(Seed, Opts),
    run(Cfg, Trace).

%% @doc Run a configuration and trace to quiescence, then check.
-spec run(map(), [hm_sim:action()]) -> hm_sim:result().
run(Cfg = #{n := N, seed := Seed, fragments := F, copies := Copies},
    Trace) ->
    Nodes = hm_sim:nodes_of(N),
    Placement = hm_ring:placement(hm_ring:new(Nodes), F, Copies),
    S0 = #{driver => ?MODULE, now => 0, seq => 0, q => gb_trees:empty(), cfg => Cfg,
           nodes => Nodes, universe => Nodes, rand => rand:seed_s(exsss, {Seed, 16#f7, 16#ab}),
           reps => maps:from_list([{Nd, #{}} || Nd <- Nodes]), inc => #{}, groups => all,
           epochs => #{}, applied => #{}, ops => #{}, failures => [], faults => true,
           stats => #{}, samples => [], pool => Nodes, holders => Placement, moves => [],
           hints => #{}, acked => []},
    S1 = maps:fold(fun(K, Hs, Acc) ->
                           lists:foldl(fun(Nd, A) -> new_copy(Nd, K, Hs, A) end, Acc, Hs)
                   end, S0, Placement),
    hm_sim:drive(S1, Trace, fun finish/1).

%% @doc Run seeds `From' .. `From + Count - 1'.
-spec check_seeds({integer(), pos_integer()}, map()) ->
          {non_neg_integer(), non_neg_integer(), map(), [{integer(), hm_sim:result()}]}.
check_seeds({From, Count}, Opts) ->
    lists:foldl(fun(Seed, {P, Fl, Tot, Bad}) ->
                        Res = #{ok := Ok, stats := St} = run_seed(Seed, Opts),
                        Tot1 = hm_sim:totals(St, Tot),
                        case Ok of
                            true -> {P + 1, Fl, Tot1, Bad};
                            false -> {P, Fl + 1, Tot1, Bad ++ [{Seed, Res}]}
                        end
                end, {0, 0, #{}, []}, lists:seq(From, From + Count - 1)).

%% A copy of fragment K on Nd: empty, syncing unless it is one of a new table's holders.
new_copy(Nd, K, Members, S = #{cfg := Cfg = #{type := Type, policy := Policy},
                               reps := Reps}) ->
    Inc = maps:get({Nd, K}, maps:get(inc, S), 0) + 1,
    {R, Effs} = hm_ec_table:new(maps:merge(#{tab => frag_tab(K), type => Type,
                                             policy => Policy, record => {r, 3},
                                             cookie => sim, node => Nd, incarnation => Inc,
                                             members => Members,
                                             store => hm_ec_store_map:new(set, ram),
                                             events => true},
                                           hm_sim_crdt_table:replica_opts(Cfg))),
    S1 = S#{reps := Reps#{Nd := (maps:get(Nd, Reps))#{K => R}},
            inc := (maps:get(inc, S))#{{Nd, K} => Inc}},
    effects(Nd, K, Effs, S1).

frag_tab(K) -> list_to_atom("sim_frag" ++ integer_to_list(K)).

copy(Nd, K, #{reps := Reps}) -> maps:get(K, maps:get(Nd, Reps), none).

put_copy(Nd, K, R, S = #{reps := Reps}) ->
    S#{reps := Reps#{Nd := (maps:get(Nd, Reps))#{K => R}}}.

%% A copy's effects: its sends go through the network tagged with the fragment; the dots
%% of the operations it submits are recorded by the caller.
effects(Nd, K, Effs, S) ->
    S1 = lists:foldl(fun({timer, Ms, Msg}, Acc) ->
                             Inc = maps:get({Nd, K}, maps:get(inc, Acc)),
                             hm_sim:schedule(Ms, {timer, Nd, K, Inc, Msg}, Acc);
                        (_, Acc) -> Acc
                     end, S, Effs),
    hm_sim:send_all(Nd, [{To, {K, M}} || {send, To, M} <- Effs], S1).

%%% ================================================================ driver callbacks

-spec event(term(), map()) -> map().
event({tick, Nd}, S0) ->
    S = hm_sim:schedule(?TICK, {tick, Nd}, S0),
    Up = hm_sim:reachable(Nd, S),
    S1 = maps:fold(fun(K, R, Acc) ->
                           {R1, Effs} = hm_ec_table:tick(Up, R),
                           effects(Nd, K, Effs, put_copy(Nd, K, R1, Acc))
                   end, S, maps:get(Nd, maps:get(reps, S))),
    advance_moves(hand_off(Nd, S1));
event({deliver, From, To, {K, Msg}, Epoch}, S) ->
    case hm_sim:deliverable(From, To, Epoch, S) andalso copy(To, K, S) of
        false -> hm_sim:bump(dropped_cut, S);
        none -> hm_sim:bump(dropped_no_copy, S);      % moved away: the runtime drops it too
        R ->
            {R1, Effs} = hm_ec_table:handle(From, sim, Msg, R),
            effects(To, K, Effs, put_copy(To, K, R1, S))
    end;
event({action, A}, S) ->
    action(A, hm_sim:bump(actions, S));
event({timer, Nd, K, Inc, Msg}, S) ->
    %% a CRDT table's broadcast epoch, on the copy that set it if it is still there
    case {copy(Nd, K, S), maps:get({Nd, K}, maps:get(inc, S))} of
        {none, _} -> S;
        {R, Inc} ->
            {R1, Effs} = hm_ec_table:timeout(Msg, R),
            effects(Nd, K, Effs, put_copy(Nd, K, R1, S));
        _ -> S
    end.

-spec nodeup(node(), node(), map()) -> map().
nodeup(At, Peer, S) ->
    maps:fold(fun(K, R, Acc) ->
                      {R1, Effs} = hm_ec_table:nodeup(Peer, R),
                      effects(At, K, Effs, put_copy(At, K, R1, Acc))
              end, S, maps:get(At, maps:get(reps, S))).

-spec action(term(), map()) -> map().
action({op, Nd, Key, Spec}, S = #{cfg := Cfg = #{fragments := F}, now := Now}) ->
    K = hm_ec_frag:fragment(Key, F),
    KeyOp = case Spec of
                {update, Op} -> {Key, {update, hm_sim_crdt_table:client_op(Op, Now, Cfg)}};
                {write, V} -> {Key, {write, {r, Key, V}}};
                delete -> {Key, delete};
                {delete_object, V} -> {Key, {delete_object, {r, Key, V}}}
            end,
    S1 = hm_sim:bump(ops, S),
    case copy(Nd, K, S1) of
        none -> pass_on(Nd, K, KeyOp, S1);
        R ->
            case hm_ec_table:status(R) of
                ready -> element(2, submit_at(Nd, K, KeyOp, S1));
                syncing -> pass_on(Nd, K, KeyOp, S1)
            end
    end;
action({partition, Shape, Groups}, S) ->
    hm_sim:bump({partition, Shape}, hm_sim:reconnect(S#{groups := Groups}, S));
action(heal, S) ->
    hm_sim:reconnect(S#{groups := all}, S);
action({pool, Change, Nd}, S = #{pool := Pool, moves := []}) ->
    NewPool = case Change of
                  del -> Pool -- [Nd];
                  add -> lists:usort([Nd | Pool])
              end,
    case NewPool =:= Pool orelse NewPool =:= [] of
        true -> S;
        false -> start_moves(NewPool, hm_sim:bump({pool, Change}, S))
    end;
action({pool, _, _}, S) ->
    hm_sim:bump(pool_change_skipped, S);               % one change at a time, as the runtime
action(_, S) -> S.

%%% ================================================================ writes, hints

%% Submit at Nd's ready copy of fragment K: an acknowledged operation, by its dot.
submit_at(Nd, K, KeyOp, S = #{now := Now}) ->
    R = copy(Nd, K, S),
    {R1, Effs} = hm_ec_table:submit(KeyOp, async, client, {Now * 1000, hm_sim:reachable(Nd, S)},
                                    R),
    S1 = put_copy(Nd, K, R1, S),
    case KeyOp of
        {Key, {update, Op}} ->
            %% a CRDT table's update: acknowledged when this copy took it
            [ok] = [Reply || {reply, client, Reply} <- Effs],
            {Id, Info} = hm_sim_crdt_table:recorded(Key, Op, Effs, R1, maps:get(cfg, S)),
            Us = maps:get(updates, S1, #{}),
            {ok, effects(Nd, K, Effs, S1#{acked := [{K, Id} | maps:get(acked, S1)],
                                          updates => Us#{Id => Info}})};
        _ -> submit_record(Nd, K, Effs, S1)
    end.

submit_record(Nd, K, Effs, S1) ->
    case [Msg || {send, _, {op, Msg}} <- Effs] ++ [M || {event, {applied, M}} <- Effs] of
        [{O, Ts, _} | _] ->
            Dot = {O, maps:get(O, Ts)},
            {ok, effects(Nd, K, Effs, S1#{acked := [{K, Dot} | maps:get(acked, S1)]})};
        [] ->
            {ok, effects(Nd, K, Effs, S1)}
    end.

%% Nd has no ready copy of K: the runtime's pass-on, with Nd's hints of K first.
pass_on(Nd, K, KeyOp, S) ->
    S1 = run_pass_on(Nd, K, KeyOp, S),
    hm_sim:bump(passed_on, S1).

run_pass_on(Nd, K, New, S = #{hints := Hints}) ->
    Mine = maps:get({Nd, K}, Hints, []),
    Try = fun(KeyOp, Acc) -> try_holders(Nd, K, KeyOp, Acc) end,
    {Sent, Outcome, S1} = hm_ec_hints:pass_on(Mine, New, Try, S),
    Left = [H || H = {Id, _} <- Mine, not lists:member(Id, Sent)],
    Kept = case Outcome of
               kept -> Left ++ [{maps:get(seq, S1), New}];
               _ -> Left
           end,
    S2 = case Outcome of
             kept -> hm_sim:bump(hints_kept, S1#{seq := maps:get(seq, S1) + 1});
             _ -> S1
         end,
    S2#{hints := (maps:get(hints, S2))#{{Nd, K} => Kept}}.

%% The first holder of K that Nd reaches and that is ready takes the write (a syncing one
%% refuses it, and the next is tried).
try_holders(Nd, K, KeyOp, S = #{holders := Holders}) ->
    Up = [H || H <- hm_sim:reachable(Nd, S), copy(H, K, S) =/= none,
               hm_ec_table:status(copy(H, K, S)) =:= ready],
    case hm_ec_frag:holder_order(Nd, maps:get(K, Holders), Up) of
        [] -> {unreachable, S};
        [H | _] -> submit_at(H, K, KeyOp, S)
    end.

hand_off(Nd, S = #{hints := Hints}) ->
    maps:fold(fun({N, K}, [_ | _], Acc) when N =:= Nd -> run_pass_on(Nd, K, none, Acc);
                 (_, _, Acc) -> Acc
              end, S, Hints).

%%% ================================================================ moves

start_moves(NewPool, S = #{pool := Pool, cfg := #{fragments := F, copies := N}}) ->
    Old = hm_ring:placement(hm_ring:new(Pool), F, N),
    New = hm_ring:placement(hm_ring:new(NewPool), F, N),
    S#{pool := NewPool, moves := hm_ring:moves(Old, New)}.

%% Each tick, each move goes as far as it can: add the new copies (every holder must be able
%% to talk, as Mnesia needs), then remove the leaving ones once the new are ready and the
%% others hold what each leaving one originated.
advance_moves(S = #{moves := []}) -> S;
advance_moves(S = #{moves := Moves}) ->
    {Left, S1} = lists:foldl(fun(Move, {Acc, St}) ->
                                     case step(Move, St) of
                                         {done, St1} -> {Acc, St1};
                                         {Next, St1} -> {[Next | Acc], St1}
                                     end
                             end, {[], S}, Moves),
    S1#{moves := lists:reverse(Left)}.

step({K, Add, Remove} = Move, S = #{holders := Holders}) ->
    Hs = maps:get(K, Holders),
    All = lists:usort(Hs ++ Add),
    case all_talk(All, S) of
        false -> {Move, S};
        true ->
            case Add -- Hs of
                [_ | _] = New ->
                    S1 = S#{holders := Holders#{K := All}},
                    S2 = lists:foldl(fun(Nd, Acc) -> new_copy(Nd, K, All, Acc) end, S1, New),
                    {Move, members(K, All, S2)};
                [] ->
                    Ready = lists:all(fun(Nd) -> hm_ec_table:status(copy(Nd, K, S)) =:= ready
                                      end, All),
                    case Ready andalso lists:all(fun(Nd) -> caught_up(Nd, K, All, S) end,
                                                 Remove) of
                        false -> {Move, S};
                        true ->
                            Final = All -- Remove,
                            S1 = lists:foldl(fun(Nd, Acc) -> drop_copy(Nd, K, Acc) end, S,
                                             Remove),
                            {done, members(K, Final, S1#{holders := Holders#{K := Final}})}
                    end
            end
    end.

all_talk(Nodes, S) ->
    lists:all(fun(A) -> lists:all(fun(B) -> hm_sim:connected(A, B, S) end, Nodes) end, Nodes).

caught_up(Nd, K, All, S) ->
    Delivered = fun(N) -> hm_tcsb:delivered(hm_ec_table:tcsb(copy(N, K, S))) end,
    hm_partition:removable(Nd, hm_ec_table:info([], copy(Nd, K, S)),
                           [Delivered(N) || N <- All -- [Nd]]).

drop_copy(Nd, K, S = #{reps := Reps}) ->
    hm_sim:bump(copies_removed, S#{reps := Reps#{Nd := maps:remove(K, maps:get(Nd, Reps))}}).

members(K, Ms, S) ->
    lists:foldl(fun(Nd, Acc) ->
                        case copy(Nd, K, Acc) of
                            none -> Acc;
                            R -> put_copy(Nd, K, hm_ec_table:set_members(Ms, R), Acc)
                        end
                end, S, Ms).

%%% ================================================================ checks

%% A CRDT table: every key's value on every holder of its fragment is the type's spec over
%% the updates delivered, and a counter's is within Maelstrom's bound.
crdt_values(S = #{cfg := #{crdt := {Type, Flavor}}, holders := Holders}) ->
    Us = maps:get(updates, S, #{}),
    lists:foldl(fun({K, Hs}, Acc) ->
                        Rs = [R || Nd <- Hs, R <- [copy(Nd, K, Acc)], R =/= none],
                        Views = [{Nd, hm_sim_crdt_table:view(copy(Nd, K, Acc))}
                                 || Nd <- Hs, copy(Nd, K, Acc) =/= none],
                        Keys = lists:usort([Key || {Key, _} <- maps:keys(Us),
                                                   hm_ec_frag:fragment(Key, maps:size(Holders))
                                                       =:= K]),
                        Fs = lists:append([hm_sim_crdt_table:key_check(Key, Type, Flavor, hd(Rs),
                                                                        Us, Views)
                                           || Rs =/= [], Key <- Keys]),
                        lists:foldl(fun hm_sim:fail/2, Acc, Fs)
                end, S, maps:to_list(Holders));
crdt_values(S) -> S.

-spec converged(map()) -> boolean().
converged(S = #{holders := Holders, moves := Moves, hints := Hints}) ->
    Moves =:= [] andalso lists:all(fun(Hs) -> Hs =:= [] end, maps:values(Hints)) andalso
        lists:all(fun({K, Hs}) -> fragment_converged(K, Hs, S) end, maps:to_list(Holders)).

fragment_converged(K, Hs, S) ->
    Rs = [copy(Nd, K, S) || Nd <- Hs],
    Shown = case maps:get(cfg, S) of
                #{crdt := _} -> fun hm_sim_crdt_table:view/1;    % a CRDT table: per-key values
                _ -> fun rows/1
            end,
    lists:all(fun(R) -> R =/= none andalso hm_ec_table:status(R) =:= ready end, Rs) andalso
        length(lists:usort([hm_tcsb:delivered(hm_ec_table:tcsb(R)) || R <- Rs])) =:= 1 andalso
        length(lists:usort([Shown(R) || R <- Rs])) =:= 1.

-spec quiescent(map()) -> boolean().
quiescent(S = #{holders := Holders}) ->
    converged(S) andalso
        lists:all(fun({K, Hs}) ->
                          lists:all(fun(Nd) ->
                                            R = copy(Nd, K, S),
                                            B = hm_ec_table:tcsb(R),
                                            hm_tcsb:log_size(B) =:= 0 andalso
                                                hm_tcsb:pending(B) =:= 0 andalso
                                                (not is_map_key(crdt, maps:get(cfg, S)) orelse
                                                 hm_sim_crdt_table:leftovers(R) =:= [])
                                    end, Hs)
                  end, maps:to_list(Holders)).

rows(R) -> hm_ec_store_map:rows_map(hm_ec_table:store(R)).

finish(S0 = #{holders := Holders, pool := Pool, reps := Reps, stats := St, acked := Acked,
              hints := Hints, cfg := #{fragments := F, copies := N}}) ->
    S1 = lists:foldl(fun({K, Hs}, Acc) ->
                             case fragment_converged(K, Hs, Acc) of
                                 true -> Acc;
                                 false -> hm_sim:fail({fragment_diverged, K, Hs}, Acc)
                             end
                     end, S0, maps:to_list(Holders)),
    Left = [H || H = {_, [_ | _]} <- maps:to_list(Hints)],
    S2 = case Left of
             [] -> S1;
             _ -> hm_sim:fail({hints_left, Left}, S1)
         end,
    Holds = case S2 of
                #{cfg := #{crdt := {_, Flavor}}} ->
                    fun(Id, R) -> hm_sim_crdt_table:holds(Id, Flavor, R) end;
                _ ->
                    fun(Dot, R) -> hm_vv:contains(Dot, hm_tcsb:delivered(hm_ec_table:tcsb(R)))
                    end
            end,
    Lost = [{K, Dot} || {K, Dot} <- Acked, Nd <- maps:get(K, Holders),
                        copy(Nd, K, S2) =:= none orelse not Holds(Dot, copy(Nd, K, S2))],
    S3a = case Lost of
              [] -> S2;
              _ -> hm_sim:fail({acknowledged_op_lost, lists:sublist(lists:usort(Lost), 5)}, S2)
          end,
    S3 = crdt_values(S3a),
    Ring = hm_ring:placement(hm_ring:new(Pool), F, N),
    Placed = maps:map(fun(_, Hs) -> lists:sort(Hs) end, Holders),
    S4 = case maps:map(fun(_, Hs) -> lists:sort(Hs) end, Ring) of
             Placed -> S3;
             Want -> hm_sim:fail({placement, Placed, Want}, S3)
         end,
    Stray = [{Nd, maps:keys(Cs)} || {Nd, Cs} <- maps:to_list(Reps), map_size(Cs) > 0,
                                    not lists:member(Nd, Pool)],
    S5 = case Stray of
             [] -> S4;
             _ -> hm_sim:fail({copies_outside_pool, Stray}, S4)
         end,
    %% every client operation was applied somewhere (directly, passed on, or a hint handed off)
    S6 = case {length(Acked), maps:get(ops, St, 0)} of
             {Ops, Ops} -> S5;
             {Got, Ops} -> hm_sim:fail({operations_unaccounted, Ops - Got}, S5)
         end,
    #{failures := Fs} = S6,
    #{ok => Fs =:= [], failures => Fs,
      stats => St#{quiesced_ms => maps:get(quiesced_ms, S6), acked => length(Acked)}}.
