%% @doc The checkers of the partitioned-table family ({@link hm_sim_frag}), run at the end
%% of a schedule (and, for convergence and quiescence, every tick after the work phase):
%% see the family's module doc for what each asserts.
-module(hm_sim_frag_check).

-export([converged/1, quiescent/1, finish/1]).

-import(hm_sim_frag, [copy/3]).

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
                        lists:foldl(fun hm_sim_engine:fail/2, Acc, Fs)
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
    hm_sim_engine:copies_converged(Rs, Shown).

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

%% What reads show on the copy, per key (a CRDT table's updates its rows lack included).
rows(R) -> maps:groups_from_list(fun(Rec) -> element(2, Rec) end, hm_ec_table:rows(R)).

%% Session order: each operation a node issued on a key is causally after the one it issued
%% before on that key (its timestamp names that one's dot), wherever each was applied: by
%% the node's own copy, by a holder it was passed to, or by a holder a hint was handed to.
%% Operations on keys of one fragment are ordered the same way; checking per key is what a
%% client can observe (a later write of the key superseding an earlier one).
%% A node's session ends when it crashes (it is in memory), and an operation lost with a
%% crash (a hint, or a write no other copy had) orders nothing after it. Nor does one taken
%% by a copy that crashed later: holders stop waiting for the dots of a gone incarnation
%% (hm_ec_table:covers/2), which is the documented exception.
session_order(S = #{sessions := Ss0, closed := Closed, op_dots := Ds, lost_crash := LC,
                    cfg := #{fragments := F}}) ->
    Ss = lists:sort(maps:to_list(Ss0)) ++ Closed,
    Gone = maps:get(gone, S, #{}),
    Kept = fun(Key, A) ->
                   is_map_key(A, Ds) andalso
                       begin
                           K = hm_ec_frag:fragment(Key, F),
                           {Dot = {Origin, _}, _} = maps:get(A, Ds),
                           not is_map_key({K, Dot}, LC) andalso
                               not is_map_key({K, Origin}, Gone)
                       end
           end,
    Bad = [{Nd, Key, A, B}
           || {{Nd, Key}, Rev} <- Ss,
              {A, B} <- pairs(lists:reverse(Rev)),
              Kept(Key, A), is_map_key(B, Ds),
              not after_dot(maps:get(A, Ds), maps:get(B, Ds))],
    S1 = hm_sim_engine:bump(session_pairs, lists:sum([max(0, length(L) - 1) || {_, L} <- Ss]), S),
    case Bad of
        [] -> S1;
        _ -> hm_sim_engine:fail({session_order, length(Bad),
                          [{Nd, Key, A, maps:get(A, Ds), B, maps:get(B, Ds)}
                           || {Nd, Key, A, B} <- lists:sublist(Bad, 3)]}, S1)
    end.

pairs([A, B | T]) -> [{A, B} | pairs([B | T])];
pairs(_) -> [].

after_dot({DotA, _}, {_, TsB}) -> hm_vv:contains(DotA, TsB).

%% Every fragment has its full number of copies again (its `N', or the whole pool when that
%% is smaller), each on a node that is up (a node that died for good holds none) and ready:
%% the copies of a dead node were re-created on the survivors.
full_copies(S = #{holders := Holders, pool := Pool, down := Down,
                  cfg := #{copies := N}}) ->
    Want = min(N, length(Pool)),
    Short = [{K, Live}
             || {K, Hs} <- lists:sort(maps:to_list(Holders)),
                Live <- [[Nd || Nd <- lists:usort(Hs), not lists:member(Nd, Down),
                                copy(Nd, K, S) =/= none,
                                hm_ec_table:status(copy(Nd, K, S)) =:= ready]],
                length(Live) =/= Want orelse length(Hs) =/= Want],
    case Short of
        [] -> S;
        _ -> hm_sim_engine:fail({fragments_without_full_copies, Want, Short}, S)
    end.

%% @doc The checks at the end of a run, and the run's result.
-spec finish(map()) -> hm_sim:result().
finish(S0 = #{holders := Holders, pool := Pool, reps := Reps, stats := St, acked := Acked,
              hints := Hints, cfg := #{fragments := F, copies := N}}) ->
    S1 = lists:foldl(fun({K, Hs}, Acc) ->
                             case fragment_converged(K, Hs, Acc) of
                                 true -> Acc;
                                 false -> hm_sim_engine:fail({fragment_diverged, K, Hs}, Acc)
                             end
                     end, S0, maps:to_list(Holders)),
    Left = [H || H = {_, [_ | _]} <- maps:to_list(Hints)],
    S2 = case Left of
             [] -> S1;
             _ -> hm_sim_engine:fail({hints_left, Left}, S1)
         end,
    Holds = case S2 of
                #{cfg := #{crdt := {_, Flavor}}} ->
                    fun(Id, R) -> hm_sim_crdt_table:holds(Id, Flavor, R) end;
                _ ->
                    fun(Dot, R) -> hm_vv:contains(Dot, hm_tcsb:delivered(hm_ec_table:tcsb(R)))
                    end
            end,
    LostCrash = maps:get(lost_crash, S2),
    Lost = [{K, Dot} || {K, Dot} <- Acked, not is_map_key({K, Dot}, LostCrash),
                        Nd <- maps:get(K, Holders),
                        copy(Nd, K, S2) =:= none orelse not Holds(Dot, copy(Nd, K, S2))],
    S3a = case Lost of
              [] -> S2;
              _ -> hm_sim_engine:fail({acknowledged_op_lost,
                                       lists:sublist(lists:usort(Lost), 5)}, S2)
          end,
    S3 = crdt_values(S3a),
    Ring = hm_ring:placement(hm_ring:new(Pool), F, N),
    Placed = maps:map(fun(_, Hs) -> lists:sort(Hs) end, Holders),
    S4 = case maps:map(fun(_, Hs) -> lists:sort(Hs) end, Ring) of
             Placed -> S3;
             Want -> hm_sim_engine:fail({placement, Placed, Want}, S3)
         end,
    Stray = [{Nd, maps:keys(Cs)} || {Nd, Cs} <- maps:to_list(Reps), map_size(Cs) > 0,
                                    not lists:member(Nd, Pool)],
    S5a = case Stray of
              [] -> S4;
              _ -> hm_sim_engine:fail({copies_outside_pool, Stray}, S4)
          end,
    S5 = full_copies(S5a),
    %% every client operation was applied somewhere (directly, passed on, or a hint handed off)
    %% (or kept as a hint on a node that crashed before handing it off)
    HintsLost = maps:size(maps:get(lost_ids, S5)),
    S6a = case {length(Acked) + HintsLost, maps:get(ops, St, 0)} of
              {Ops, Ops} -> S5;
              {Got, Ops} -> hm_sim_engine:fail({operations_unaccounted, Ops - Got}, S5)
          end,
    S6 = session_order(S6a),
    #{failures := Fs} = S6,
    #{ok => Fs =:= [], failures => Fs,
      stats => (maps:get(stats, S6))#{quiesced_ms => maps:get(quiesced_ms, S6),
                                      acked => length(Acked),
                                      writes_lost_with_crash => maps:size(LostCrash)}}.
