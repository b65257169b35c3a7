%% @doc Checkers 1 (convergence), 2 (no lost acknowledged write) and 5 (metadata bound) of
%% the table copies' simulation, at the end of a run (see {@link hm_sim}, which describes
%% them).
-module(hm_sim_ec_check).

-export([converged/1, quiescent/1, finish/1]).

-import(hm_sim_engine, [fail/2, reps/1]).

%% @doc Checker 1 while it runs: every copy ready, with the same delivered vector and the
%% same rows.
-spec converged(map()) -> boolean().
converged(S) -> hm_sim_engine:copies_converged(reps(S), fun hm_sim_ec:rows/1).

%% @doc Converged, no writer waiting, and no log, buffer, clear, held answer or key timestamp
%% left on any copy.
-spec quiescent(map()) -> boolean().
quiescent(S) ->
    %% no writer waits for a held answer with operations still to make
    maps:get(writer_waits, S, #{}) =:= #{} andalso converged(S) andalso
        lists:all(fun(R) ->
                          B = hm_ec_table:tcsb(R),
                          hm_tcsb:log_size(B) =:= 0 andalso hm_tcsb:pending(B) =:= 0
                              andalso hm_ec_table:clears(R) =:= []
                              andalso hm_ec_table:held(R) =:= 0
                              andalso lists:all(fun(KS) -> hm_ec_key:timestamps(KS) =:= 0 end,
                                                maps:values(hm_sim_ec:meta(R)))
                  end, reps(S)).

%% @doc The checks at the end of a run (1, 2 and 5) and the run's result and statistics.
-spec finish(map()) -> hm_sim_engine:result().
finish(S0 = #{cfg := Cfg, nodes := Nodes, ops := Ops, stats := St}) ->
    Rs = reps(S0),
    %% 1. convergence
    Rows = [hm_sim_ec:rows(R) || R <- Rs],
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
                   Big = [{K, KS} || {K, KS} <- maps:to_list(hm_sim_ec:meta(R)),
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
                                                         KS <- maps:values(hm_sim_ec:meta(R))]]),
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
