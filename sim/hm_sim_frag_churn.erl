%% @doc Churn in the partitioned-table family ({@link hm_sim_frag}): crashes and restarts of
%% nodes (what a crash loses, and what it is counted as), a node that dies for good, and
%% pool changes: the moves of fragments between nodes ({@link hm_ring:moves/2}), in the
%% steps of the runtime's plan ({@link hm_frag_move:plan/3}): the copies of a dead node
%% dropped at once, each added copy catching up by state transfer, and each leaving copy
%% that is up removed once the others hold what it must hand over
%% ({@link hm_partition:removable/3}).
-module(hm_sim_frag_churn).

-export([crash/2, die/2, dead/2, hinted/1, crash_armed/1, restart/2, restartable/1,
         start_moves/2, advance_moves/1]).

-import(hm_sim_frag, [copy/3, put_copy/4, reachable/2, new_copy/4, nodeup/3]).

%%% ================================================================ crashes

%% Nd crashes: its links break (what is in flight on them is lost), its ram copies go, and
%% so do its hints and its sessions (held in memory). An acknowledged write that no other
%% copy of its fragment has delivered is lost with the crash, as a hint of Nd is; both are
%% counted, not failed.
-spec crash(node(), map()) -> map().
crash(Nd, S0 = #{down := Down, nodes := Nodes, hints := Hints, hint_ids := HIds,
                 sessions := Ss, acked := Acked}) ->
    case lists:member(Nd, Down) of
        true -> S0;
        false ->
            S1 = lists:foldl(fun(M, Acc) -> hm_sim_engine:new_epoch(Nd, M, Acc) end, S0,
                             Nodes -- [Nd]),
            Held = maps:get(Nd, maps:get(reps, S1)),
            Others = fun(K) -> [R || M <- Nodes -- [Nd | Down], R <- [copy(M, K, S1)],
                                     R =/= none] end,
            Has = fun(Dot, R) -> hm_vv:contains(Dot, hm_tcsb:delivered(hm_ec_table:tcsb(R)))
                  end,
            Lost = [{K, Dot} || {K, Dot} <- Acked, is_map_key(K, Held),
                                Has(Dot, maps:get(K, Held)),
                                not lists:any(fun(R) -> Has(Dot, R) end, Others(K))],
            Mine = [{Key, Hs} || Key = {N, _} <- maps:keys(Hints), N =:= Nd,
                                 Hs <- [maps:get(Key, Hints)]],
            LostIds = [maps:get(Seq, HIds) || {_, Hs} <- Mine, {Seq, _} <- Hs],
            {Closed, Open} = lists:partition(fun({{N, _}, _}) -> N =:= Nd end,
                                             maps:to_list(Ss)),
            Svv = maps:filter(fun({N, _}, _) -> N =/= Nd end, maps:get(svv, S1, #{})),
            S2 = S1#{down := [Nd | Down],
                     reps := (maps:get(reps, S1))#{Nd := #{}},
                     crashed := (maps:get(crashed, S1))#{Nd => maps:keys(Held)},
                     hints := maps:without([Key || {Key, _} <- Mine], Hints),
                     gone => maps:merge(maps:get(gone, S1, #{}),
                                        maps:from_list(
                                          [{{K, hm_tcsb:self(hm_ec_table:tcsb(R))}, true}
                                           || {K, R} <- maps:to_list(Held)])),
                     lost_crash := maps:merge(maps:get(lost_crash, S1),
                                              maps:from_list([{L, true} || L <- Lost])),
                     lost_ids := maps:merge(maps:get(lost_ids, S1),
                                            maps:from_list([{I, true} || I <- LostIds])),
                     sessions := maps:from_list(Open),
                     closed := Closed ++ maps:get(closed, S1),
                     svv => Svv},
            hm_sim_engine:bump(hints_lost_with_crash, length(LostIds),
                               hm_sim_engine:bump(crashes, S2))
    end.

%% The nodes up that hold hints.
-spec hinted(map()) -> [node()].
hinted(#{hints := Hints, down := Down}) ->
    lists:usort([Nd || {{Nd, _}, [_ | _]} <- maps:to_list(Hints), not lists:member(Nd, Down)]).

%% A crash of a node holding hints was due while none held any: the first that does, in the
%% work phase.
-spec crash_armed(map()) -> map().
crash_armed(S = #{armed := true, now := Now, cfg := #{duration := Dur}}) when Now =< Dur ->
    case hinted(S) of
        [] -> S;
        [Nd | _] -> hm_sim_engine:bump(crashes_holding_hints, crash(Nd, S#{armed := false}))
    end;
crash_armed(S) -> S.

%% Nd restarts: a new, empty incarnation of each copy it held and still holds (a ram copy:
%% it catches up by state transfer), then it and its peers see each other come up.
-spec restart(node(), map()) -> map().
restart(Nd, S = #{down := Down, holders := Holders}) ->
    case lists:member(Nd, Down) andalso not dead(Nd, S) of
        false -> S;
        true ->
            Ks = maps:get(Nd, maps:get(crashed, S)),
            S1 = S#{down := Down -- [Nd]},
            S2 = lists:foldl(fun(K, Acc) ->
                                     Hs = maps:get(K, Holders),
                                     case lists:member(Nd, Hs) of
                                         true -> new_copy(Nd, K, Hs, Acc);
                                         false -> Acc
                                     end
                             end, S1, Ks),
            lists:foldl(fun(M, Acc) -> nodeup(M, Nd, nodeup(Nd, M, Acc)) end,
                        hm_sim_engine:bump(restarts, S2), reachable(Nd, S2))
    end.

%% @doc Nd dies for good: it crashes (if it is up) and never restarts.
-spec die(node(), map()) -> map().
die(Nd, S = #{dead := Dead}) ->
    S1 = crash(Nd, S),
    hm_sim_engine:bump(dead_nodes, S1#{dead := lists:usort([Nd | Dead])}).

%% @doc Whether Nd died for good.
-spec dead(node(), map()) -> boolean().
dead(Nd, #{dead := Dead}) -> lists:member(Nd, Dead).

%% @doc The nodes down that restart at the end of the work phase: all but the dead.
-spec restartable(map()) -> [node()].
restartable(S = #{down := Down}) -> [Nd || Nd <- Down, not dead(Nd, S)].

%%% ================================================================ moves

-spec start_moves([node()], map()) -> map().
start_moves(NewPool, S = #{pool := Pool, cfg := #{fragments := F, copies := N}}) ->
    Old = hm_ring:placement(hm_ring:new(Pool), F, N),
    New = hm_ring:placement(hm_ring:new(NewPool), F, N),
    S#{pool := NewPool, moves := hm_ring:moves(Old, New)}.

%% Each tick, each move goes as far as it can: add the new copies (every holder must be able
%% to talk, as Mnesia needs), then remove the leaving ones once the new are ready and the
%% others hold what each leaving one originated.
-spec advance_moves(map()) -> map().
advance_moves(S = #{moves := []}) -> S;
advance_moves(S = #{moves := Moves}) ->
    {Left, S1} = lists:foldl(fun(Move, {Acc, St}) ->
                                     case step(Move, St) of
                                         {done, St1} -> {Acc, St1};
                                         {Next, St1} -> {[Next | Acc], St1}
                                     end
                             end, {[], S}, Moves),
    S1#{moves := lists:reverse(Left)}.

%% One tick of one fragment's move, in the steps of the runtime's plan
%% (hm_frag_move:plan/3): the leaving copies of nodes that are down go at once, then the new
%% copies are added once every holder can talk, then the leaving copies that are up go once
%% the new ones are ready and the others hold what each must hand over.
step({K, _, _} = Move, S0 = #{holders := Holders0}) ->
    #{drop := Drop, add := Add, hand_over := Leave} =
        hm_frag_move:plan(maps:get(K, Holders0), Move, fun(Nd) -> up(Nd, S0) end),
    S = #{holders := Holders} = drop_down(K, Drop, S0),
    Hs = maps:get(K, Holders),
    All = lists:usort(Hs ++ Add),
    case all_talk(All, S) of
        false -> {Move, S};
        true ->
            case Add of
                [_ | _] = New ->
                    S1 = S#{holders := Holders#{K := All}},
                    S2 = lists:foldl(fun(Nd, Acc) -> new_copy(Nd, K, All, Acc) end, S1, New),
                    {Move, members(K, All, S2)};
                [] ->
                    Ready = lists:all(fun(Nd) -> hm_ec_table:status(copy(Nd, K, S)) =:= ready
                                      end, All),
                    case Ready andalso lists:all(fun(Nd) -> caught_up(Nd, K, All, S) end,
                                                 Leave) of
                        false -> {Move, S};
                        true ->
                            Final = All -- Leave,
                            S1 = lists:foldl(fun(Nd, Acc) -> drop_copy(Nd, K, Acc) end, S,
                                             Leave),
                            {done, members(K, Final, S1#{holders := Holders#{K := Final}})}
                    end
            end
    end.

%% Whether a node counts as up for a move: the schedules remove a node that is down from
%% the pool only when it died for good. A node that crashed restarts (its ram copies come
%% back empty and catch up): a move waits for it, as one waits for a holder cut off.
up(Nd, S) -> not dead(Nd, S).

%% The copies of fragment K on the nodes `Drop', dead, go without handing anything over
%% (their ram copies went with the crash; what no other copy had is counted as lost with
%% it): the others stop counting them as members.
drop_down(_K, [], S) -> S;
drop_down(K, Drop, S = #{holders := Holders, reps := Reps}) ->
    Hs = maps:get(K, Holders) -- Drop,
    Reps1 = maps:map(fun(Nd, Cs) ->
                             case lists:member(Nd, Drop) of
                                 true -> maps:remove(K, Cs);
                                 false -> Cs
                             end
                     end, Reps),
    S1 = S#{reps := Reps1, holders := Holders#{K := Hs}},
    members(K, Hs, hm_sim_engine:bump(copies_of_dead_nodes_removed, length(Drop), S1)).

all_talk(Nodes, S) ->
    lists:all(fun(A) -> lists:all(fun(B) -> talk(A, B, S) end, Nodes) end, Nodes).

talk(A, B, S = #{down := Down}) ->
    not lists:member(A, Down) andalso not lists:member(B, Down) andalso
        hm_sim_engine:connected(A, B, S).

caught_up(Nd, K, All, S) ->
    Delivered = fun(N) -> hm_tcsb:delivered(hm_ec_table:tcsb(copy(N, K, S))) end,
    hm_partition:removable(Nd, hm_ec_table:info([], copy(Nd, K, S)),
                           [Delivered(N) || N <- All -- [Nd]]).

drop_copy(Nd, K, S = #{reps := Reps}) ->
    hm_sim_engine:bump(copies_removed, S#{reps := Reps#{Nd := maps:remove(K, maps:get(Nd, Reps))}}).

members(K, Ms, S) ->
    lists:foldl(fun(Nd, Acc) ->
                        case copy(Nd, K, Acc) of
                            none -> Acc;
                            R -> put_copy(Nd, K, hm_ec_table:set_members(Ms, R), Acc)
                        end
                end, S, Ms).

